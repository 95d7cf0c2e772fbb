"""Weight bytes: predicted vs measured.

1. vLLM's "Model loading took X GiB" (rank 0) from ../shared/data/validation/vllm_startup_dev.jsonl, against
   rank_weight_bytes + rope_cache_bytes for the row's TP/PP/dtype/quantization.
2. Parameter counts and safetensors total_size in ../shared/data/models/catalog.jsonl, against the inventory.

Models are resolved through resolve_model: the bundled catalog, or the config copies in
../shared/data/models/configs. Rows whose model neither knows are listed as skipped.
Run: python bench/weights_accuracy.py
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from oomguard.errors import OomguardError
from oomguard.models.resolve import resolve_model
from oomguard.models.spec import ModelSpec, Role
from oomguard.models.weights import (
    RankPlacement,
    checkpoint_weight_bytes,
    rank_weight_bytes,
    rope_cache_bytes,
)
from oomguard.units import GiB

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
CONFIGS = DATA / "models" / "configs"
VLLM_RUNTIME_QUANT = {"fp8", "bitsandbytes", "mxfp4"}


def local_dirs() -> dict[str, Path]:
    return {str(p.parent.relative_to(CONFIGS)).lower(): p.parent for p in CONFIGS.glob("*/*/config.json")}


def resolve(model_id: str, dtype: str | None, quantization: str | None) -> ModelSpec:
    local = local_dirs().get(model_id.lower())
    return resolve_model(str(local) if local else model_id, dtype=dtype, quantization=quantization)


def row_flags(row: dict) -> tuple[str | None, str | None]:
    dtype = row.get("dtype") if row.get("dtype") in ("bfloat16", "float16", "float32", "half") else None
    quant = str(row.get("quantization") or "").split(" ")[0].lower()
    return dtype, (quant if quant in VLLM_RUNTIME_QUANT else None)


def loading_table() -> list[float]:
    errors: list[float] = []
    skipped: list[str] = []
    print("## vLLM 'Model loading took' (rank 0) vs predicted")
    print(f"{'model':58} {'tp':>2} {'pp':>2} {'measured':>9} {'predicted':>9} {'error':>7}  source")
    for line in (DATA / "validation" / "vllm_startup_dev.jsonl").read_text().splitlines():
        row = json.loads(line)
        measured = row["measured"].get("weights_gib")
        if measured is None:
            continue
        dtype, quant = row_flags(row)
        try:
            spec = resolve(row["model"], dtype, quant)
        except OomguardError as err:
            skipped.append(f"{row['model']}: {err}"[:150])
            continue
        tp, pp = int(row.get("tp") or 1), int(row.get("pp") or 1)
        place = RankPlacement.for_stage(spec, pp_size=pp, pp_rank=0, tp_size=tp)
        predicted = (rank_weight_bytes(spec, place).total + rope_cache_bytes(spec)) / GiB
        err = (predicted - measured) / measured * 100
        errors.append(abs(err))
        print(
            f"{row['model'][:58]:58} {tp:>2} {pp:>2} {measured:>9.2f} {predicted:>9.2f} {err:>+6.2f}%  "
            f"{spec.weights_source}"
        )
    for s in skipped:
        print(f"  skipped: {s}")
    return errors


def catalog_table() -> tuple[list[float], list[float]]:
    param_errors: list[float] = []
    size_errors: list[float] = []
    print("\n## catalog.jsonl: parameters and safetensors total_size vs the inventory")
    print(f"{'model':48} {'params expected':>16} {'predicted':>16} {'size expected':>15} {'predicted':>15}")
    for line in (DATA / "models" / "catalog.jsonl").read_text().splitlines():
        record = json.loads(line)
        try:
            spec = resolve(record["hf_id"], None, None)
        except OomguardError:
            print(f"{record['hf_id'][:48]:48} (not resolvable offline)")
            continue
        computed = record["params_computed_from_config"]
        # The catalog counts the main model; text_only excludes vision, MTP is listed apart.
        expected = computed.get("total")
        predicted = sum(
            t.numel
            for t in spec.tensors
            if t.role not in (Role.MTP,)
            and not ("text decoder only" in computed.get("scope", "") and t.role == Role.VISION)
        )
        param_errors.append(abs(predicted - expected) / expected * 100)
        size = (record.get("safetensors_total_size") or {}).get("bytes")
        predicted_size = checkpoint_weight_bytes(spec).total
        if size:
            size_errors.append(abs(predicted_size - size) / size * 100)
        print(
            f"{record['hf_id'][:48]:48} {expected:>16,} {predicted:>16,} {size or 0:>15,} "
            f"{predicted_size if size else 0:>15,}"
        )
    return param_errors, size_errors


def summary(name: str, errors: list[float]) -> None:
    if errors:
        print(
            f"{name}: n={len(errors)} median |error| {statistics.median(errors):.3f}%  "
            f"worst {max(errors):.3f}%"
        )


def main() -> int:
    loading = loading_table()
    params, sizes = catalog_table()
    print()
    summary("model loading (GiB, rank 0)", loading)
    summary("parameter count", params)
    summary("safetensors total_size", sizes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
