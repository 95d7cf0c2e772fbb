"""GPU catalog: the device total the CUDA runtime reports, name matching, and nvidia-smi parsing.

vLLM sizes everything from `torch.cuda.mem_get_info()`'s total (cudaMemGetInfo), which is less than
the marketing size and, on data-centre parts, also less than nvidia-smi's `memory.total`: an H100 SXM
reports 85,029,158,912 B (79.19 GiB) to CUDA but 81,559 MiB (79.65 GiB) to nvidia-smi. So each entry
keeps the CUDA total and says where it was read (`total_source`), plus nvidia-smi's MiB where known.

Where a source only gave two decimals of GiB, the total is that value x 2**30 rounded (exact to
~5 MiB); where it gave torch's `total_memory=NNNNNMB` (an integer MiB, floored), it is NNNNN x 2**20.

Lookups are pure and cheap (a dict hit, or a scan of ~50 entries); nothing heavy is imported.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from oomguard.errors import ConfigError, InputFormatError, UnknownGpuError
from oomguard.kinds import Provenance
from oomguard.units import GiB, MiB, TiB, format_gib, parse_bytes

# vLLM's list of parts whose GPU memory is the host's memory (vllm/utils/mem_utils.py MemorySnapshot:
# `shared_sysmem_device_mem_sms = ((8, 7), (11, 0), (12, 1))  # Orin, Thor, Spark`); on these vLLM
# replaces cudaMemGetInfo's free with psutil's available host memory. GH200 is NOT in the list: its
# HBM is separate and cudaMemGetInfo reports it.
UNIFIED_MEMORY_CAPABILITIES: frozenset[tuple[int, int]] = frozenset({(8, 7), (11, 0), (12, 1)})


@dataclass(frozen=True)
class Gpu:
    """One GPU model (or one user-given memory size) as vLLM sees it."""

    key: str  # "h100-sxm-80gb"
    name: str  # as nvidia-smi / torch print it: "NVIDIA H100 80GB HBM3"
    total_bytes: int  # cudaMemGetInfo total (= torch.cuda.get_device_properties().total_memory)
    total_source: str  # where that number comes from
    vendor: str  # "nvidia" | "amd"
    compute_capability: tuple[int, int] | None  # None for AMD
    unified_memory: bool  # vLLM takes free = host available memory (Orin, Thor, Spark)
    aliases: tuple[str, ...] = ()
    nvidia_smi_total_mib: int | None = None  # nvidia-smi --query-gpu=memory.total, where seen

    @property
    def total_gib(self) -> float:
        return self.total_bytes / GiB

    @property
    def total_kind(self) -> Provenance:
        """How well the total is known: `exact` when a CUDA-side figure was seen (torch's OOM text or
        device properties), `estimated` when only nvidia-smi's memory.total is (CUDA reports ~0.3-0.6% less),
        `derived` from a sibling part, `given` when the user gave it."""
        if self.total_source.startswith("nvidia-smi"):
            return Provenance.ESTIMATED
        if self.total_source.startswith("given"):
            return Provenance.GIVEN
        if self.total_source.startswith("derived"):
            return Provenance.DERIVED
        return Provenance.EXACT

    @property
    def total_band(self) -> int:
        """+- bytes of an nvidia-smi-only total: CUDA's total runs up to 0.6% below nvidia-smi's."""
        return int(self.total_bytes * NVIDIA_SMI_TOTAL_BAND) if self.total_kind == Provenance.ESTIMATED else 0

    def __str__(self) -> str:
        return f"{self.name} ({format_gib(self.total_bytes)})"


def _mib(n: int) -> int:
    """torch prints total_memory as whole MiB (floored): store n x 2**20."""
    return n * MiB


def _gib2(x: float) -> int:
    """A total known to two decimals of GiB: x x 2**30, rounded to a byte."""
    return round(x * GiB)


# nvidia-smi's memory.total exceeds what CUDA reports by 0.3-0.6% on data-centre parts (H100: 81559 MiB vs
# torch's 81090 MB).
NVIDIA_SMI_TOTAL_BAND = 0.006
_OOM = "PyTorch OOM text 'GPU 0 has a total capacity of {} GiB' in public logs"
_PROPS = "torch.cuda.get_device_properties print 'total_memory={}MB' in public logs"
_SMI_ONLY = (
    "nvidia-smi memory.total {} MiB x 2**20 (no CUDA-side figure found; on data-centre parts the CUDA "
    "total runs ~0.3-0.6% below nvidia-smi's, so this may overstate it)"
)


def _nv(
    key: str,
    name: str,
    total: int,
    source: str,
    cc: tuple[int, int],
    aliases: Iterable[str] = (),
    smi: int | None = None,
) -> Gpu:
    return Gpu(
        key=key,
        name=name,
        total_bytes=total,
        total_source=source,
        vendor="nvidia",
        compute_capability=cc,
        unified_memory=cc in UNIFIED_MEMORY_CAPABILITIES,
        aliases=tuple(aliases),
        nvidia_smi_total_mib=smi,
    )


def _amd(key: str, name: str, total: int, source: str, aliases: Iterable[str] = ()) -> Gpu:
    return Gpu(
        key=key,
        name=name,
        total_bytes=total,
        total_source=source,
        vendor="amd",
        compute_capability=None,
        unified_memory=False,
        aliases=tuple(aliases),
    )


# The GPU a plan assumes when none is named (the one most vLLM deployments run on); said in a note.
DEFAULT_GPU = "H100"

_H100_SXM_TOTAL = 85_029_158_912  # torch prints total_memory=81090MB
_H200_TOTAL = _mib(143156)
_A100_SXM_80_TOTAL = _gib2(79.15)
_A10G_TOTAL = _mib(22587)
_L40S_TOTAL = _mib(46068)

CATALOG: tuple[Gpu, ...] = (
    # --- Hopper -------------------------------------------------------------------------------------
    _nv(
        "h100-sxm-80gb",
        "NVIDIA H100 80GB HBM3",
        _H100_SXM_TOTAL,
        "85,029,158,912 B = 79.19 GiB: vLLM startup logs (llm-d planner accuracy sweep, v0.19 on H100) and "
        "torch total_memory=81090MB (ml-engineering output); older drivers print 81082-81089MB",
        (9, 0),
        ("h100 sxm", "h100 sxm5", "h100 sxm 80gb"),
        smi=81559,
    ),
    _nv(
        "h100-pcie-80gb",
        "NVIDIA H100 PCIe",
        _mib(81008),
        _PROPS.format(81008),
        (9, 0),
        ("h100 pcie", "h100 pcie 80gb"),
    ),
    _nv(
        "h100-nvl-94gb",
        "NVIDIA H100 NVL",
        _gib2(93.09),
        _OOM.format("93.09") + " from an H100 NVL run (93.02-93.10 seen)",
        (9, 0),
        ("h100 nvl", "h100 nvl 94gb", "h100 94gb"),
    ),
    _nv(
        "h800-80gb",
        "NVIDIA H800",
        _H100_SXM_TOTAL,
        "derived: same 80 GB HBM3 board as the H100 SXM and the same nvidia-smi memory.total (81559 MiB "
        "in public logs), so the H100 SXM's CUDA total",
        (9, 0),
        ("h800", "h800 80gb", "h800 sxm"),
        smi=81559,
    ),
    _nv(
        "h20-96gb",
        "NVIDIA H20",
        _mib(97285),
        _PROPS.format(97285) + " (comment in public kernel code)",
        (9, 0),
        ("h20", "h20 96gb"),
    ),
    _nv(
        "h200-sxm-141gb",
        "NVIDIA H200",
        _H200_TOTAL,
        _PROPS.format(143156) + "; a vLLM issue logs 139.8 GiB",
        (9, 0),
        ("h200 sxm", "h200 sxm 141gb"),
        smi=143771,
    ),
    _nv(
        "h200-nvl-141gb",
        "NVIDIA H200 NVL",
        _H200_TOTAL,
        "derived: nvidia-smi memory.total is 143771 MiB, the same as the H200 SXM, so the H200 SXM's CUDA "
        "total (a public benchmark also reports 139.8 GiB)",
        (9, 0),
        ("h200 nvl", "h200 nvl 141gb"),
        smi=143771,
    ),
    _nv(
        "gh200-96gb",
        "NVIDIA GH200 480GB",
        _gib2(94.50),
        _OOM.format("94.50") + " on the 96 GB GH200 (a vLLM issue about the '96GB H100', an SGLang log)",
        (9, 0),
        ("gh200 96gb", "gh200 480gb"),
        smi=97871,
    ),
    _nv(
        "gh200-144gb",
        "NVIDIA GH200 144G HBM3e",
        _mib(146831),
        _SMI_ONLY.format(146831),
        (9, 0),
        ("gh200 144gb", "gh200 144gb hbm3e", "gh200 624gb"),
        smi=146831,
    ),
    # --- Blackwell ----------------------------------------------------------------------------------
    _nv(
        "b200-180gb",
        "NVIDIA B200",
        _mib(182642),
        _PROPS.format(182642) + "; OOM text reads 178.35-178.36 GiB",
        (10, 0),
        ("b200", "b200 180gb", "b200 192gb", "hgx b200"),
        smi=183359,
    ),
    _nv(
        "gb200-186gb",
        "NVIDIA GB200",
        _gib2(184.31),
        _OOM.format("184.31") + " (GB200 nodes; nvidia-smi 189471 MiB)",
        (10, 0),
        ("gb200", "gb200 186gb", "gb200 nvl72"),
        smi=189471,
    ),
    _nv(
        "b300-288gb",
        "NVIDIA B300 SXM6 AC",
        _gib2(267.69),
        _OOM.format("267.69") + " (B300 runs; nvidia-smi 275040 MiB)",
        (10, 3),
        ("b300", "b300 288gb", "b300 sxm", "hgx b300"),
        smi=275040,
    ),
    _nv(
        "gb300-288gb",
        "NVIDIA GB300",
        _mib(284208),
        _SMI_ONLY.format(284208),
        (10, 3),
        ("gb300", "gb300 288gb", "gb300 nvl72"),
        smi=284208,
    ),
    _nv(
        "rtx-pro-6000-blackwell",
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        _mib(97887),
        _SMI_ONLY.format(97887),
        (12, 0),
        (
            "rtx pro 6000",
            "rtx pro 6000 blackwell",
            "pro 6000",
            "rtx pro 6000 96gb",
            "rtx pro 6000 blackwell server edition",
            "rtx pro 6000 blackwell max q workstation edition",
            "rtx pro 6000 blackwell max q",
        ),
        smi=97887,
    ),
    _nv(
        "rtx-5090",
        "NVIDIA GeForce RTX 5090",
        _gib2(31.36),
        _OOM.format("31.36") + " on 32 GB consumer Blackwell cards (31.36-31.37 seen; nvidia-smi 32607 MiB)",
        (12, 0),
        ("5090", "rtx 5090", "rtx5090", "geforce rtx 5090", "rtx 5090 32gb"),
        smi=32607,
    ),
    _nv(
        "dgx-spark-gb10",
        "NVIDIA GB10",
        _gib2(119.63),
        "vLLM 'Free memory on device (112.26/119.63 GiB)' on a DGX Spark and "
        + _OOM.format("119.63")
        + "; unified memory, so the total depends on the host's RAM reservation (121.69 also seen)",
        (12, 1),
        ("gb10", "dgx spark", "spark", "dgx spark gb10"),
    ),
    # --- Ampere / Ada / Turing / Volta --------------------------------------------------------------
    _nv(
        "a100-sxm-80gb",
        "NVIDIA A100-SXM4-80GB",
        _A100_SXM_80_TOTAL,
        _OOM.format("79.15") + " on A100 80GB (vLLM issue #13100 and others; 79.14-79.32 across drivers)",
        (8, 0),
        ("a100 sxm 80gb", "a100 sxm4 80gb", "a100 80gb sxm"),
        smi=81920,
    ),
    _nv(
        "a100-pcie-80gb",
        "NVIDIA A100 80GB PCIe",
        _gib2(79.25),
        "vLLM 'total_gpu_memory (79.25GiB)' on an Azure A100 80GB PCIe VM (david-share Phi4 README); "
        "same HBM2e as the SXM part",
        (8, 0),
        ("a100 pcie 80gb", "a100 80gb pcie"),
        smi=81920,
    ),
    _nv(
        "a100-sxm-40gb",
        "NVIDIA A100-SXM4-40GB",
        _gib2(39.56),
        _OOM.format("39.56") + " on A100 40GB",
        (8, 0),
        ("a100 sxm 40gb", "a100 sxm4 40gb"),
        smi=40960,
    ),
    _nv(
        "a100-pcie-40gb",
        "NVIDIA A100-PCIE-40GB",
        _mib(40326),
        _PROPS.format(40326) + " (39.39 GiB in OOM text)",
        (8, 0),
        ("a100 pcie 40gb", "a100 40gb pcie"),
        smi=40960,
    ),
    _nv(
        "a800-80gb",
        "NVIDIA A800-SXM4-80GB",
        _A100_SXM_80_TOTAL,
        "derived: the A100 SXM4 80GB with reduced NVLink, same memory and nvidia-smi total (81920 MiB)",
        (8, 0),
        ("a800", "a800 80gb", "a800 sxm 80gb"),
        smi=81920,
    ),
    _nv(
        "a10g-24gb",
        "NVIDIA A10G",
        _A10G_TOTAL,
        _PROPS.format(22587) + " (AWS g5); a g5 write-up reports 22.06 GiB usable",
        (8, 6),
        ("a10g", "a10g 24gb"),
        smi=23028,
    ),
    _nv(
        "a10-24gb",
        "NVIDIA A10",
        _A10G_TOTAL,
        "derived: same GA102 24 GB GDDR6 board memory and nvidia-smi total (23028 MiB) as the A10G",
        (8, 6),
        ("a10", "a10 24gb"),
        smi=23028,
    ),
    _nv(
        "a30-24gb", "NVIDIA A30", _mib(24576), _SMI_ONLY.format(24576), (8, 0), ("a30", "a30 24gb"), smi=24576
    ),
    _nv("a40-48gb", "NVIDIA A40", _mib(45416), _PROPS.format(45416), (8, 6), ("a40", "a40 48gb"), smi=46068),
    _nv("l4-24gb", "NVIDIA L4", _mib(23034), _SMI_ONLY.format(23034), (8, 9), ("l4", "l4 24gb"), smi=23034),
    _nv(
        "l40-48gb",
        "NVIDIA L40",
        _L40S_TOTAL,
        "derived: same 48 GB GDDR6 and nvidia-smi total (46068 MiB) as the L40S",
        (8, 9),
        ("l40", "l40 48gb"),
        smi=46068,
    ),
    _nv(
        "l40s-48gb",
        "NVIDIA L40S",
        _L40S_TOTAL,
        "vLLM logs 44.99 GiB on an L40S (public issue logs), = nvidia-smi 46068 MiB; with ECC on "
        "torch has printed total_memory=45589MB",
        (8, 9),
        ("l40s", "l40s 48gb"),
        smi=46068,
    ),
    _nv(
        "rtx-a6000",
        "NVIDIA RTX A6000",
        _mib(48676),
        _PROPS.format(48676),
        (8, 6),
        ("a6000", "rtx a6000", "rtx a6000 48gb"),
        smi=49140,
    ),
    _nv(
        "rtx-6000-ada",
        "NVIDIA RTX 6000 Ada Generation",
        _mib(48622),
        _PROPS.format(48622),
        (8, 9),
        ("rtx 6000 ada", "6000 ada", "rtx 6000 ada 48gb"),
        smi=49140,
    ),
    _nv(
        "rtx-3090",
        "NVIDIA GeForce RTX 3090",
        _gib2(23.57),
        _OOM.format("23.57")
        + " (vLLM issues #26863, #15105); vLLM 'Free memory on device (22.93/23.56 GiB)'",
        (8, 6),
        ("3090", "rtx 3090", "rtx3090", "geforce rtx 3090"),
        smi=24576,
    ),
    _nv(
        "rtx-4090",
        "NVIDIA GeForce RTX 4090",
        _mib(24563),
        _PROPS.format(24563),
        (8, 9),
        ("4090", "rtx 4090", "rtx4090", "geforce rtx 4090"),
        smi=24564,
    ),
    _nv(
        "t4-16gb",
        "Tesla T4",
        _gib2(14.56),
        "vLLM 'total_gpu_memory (14.56GiB)' on a Colab T4 (a public training log); the total depends on "
        "driver and ECC: torch has printed 15079-15109MB, and 15.0 GiB with ECC off",
        (7, 5),
        ("t4", "tesla t4", "nvidia t4", "t4 16gb"),
    ),
    _nv(
        "v100-sxm2-16gb",
        "Tesla V100-SXM2-16GB",
        _mib(16130),
        _PROPS.format(16130),
        (7, 0),
        ("v100 16gb", "v100 sxm2 16gb", "v100 sxm 16gb"),
    ),
    _nv(
        "v100-pcie-16gb",
        "Tesla V100-PCIE-16GB",
        _mib(16160),
        _PROPS.format(16160),
        (7, 0),
        ("v100 pcie 16gb", "v100 pcie"),
    ),
    _nv(
        "v100-sxm2-32gb",
        "Tesla V100-SXM2-32GB",
        _gib2(31.73),
        _OOM.format("31.73") + " on 32 GB V100s",
        (7, 0),
        ("v100 32gb", "v100 sxm2 32gb", "v100 sxm 32gb"),
    ),
    # --- AMD Instinct (ROCm; HIP's total, as PyTorch prints it) -------------------------------------
    _amd(
        "mi250x",
        "AMD Instinct MI250X",
        _gib2(63.98),
        "PyTorch 'HIP out of memory ... total capacity of 63.98 GiB' (one 64 GB GCD; the MI250X shows as "
        "two devices)",
        ("mi250x", "mi250"),
    ),
    _amd(
        "mi300x",
        "AMD Instinct MI300X",
        _gib2(191.98),
        "PyTorch 'HIP out of memory ... total capacity of 191.98 GiB' in public logs (191.69 in some "
        "partition modes)",
        ("mi300x", "mi300x 192gb", "mi300x vf"),
    ),
    _amd(
        "mi325x",
        "AMD Instinct MI325X",
        _gib2(255.98),
        "PyTorch 'HIP out of memory ... total capacity of 255.98 GiB' in public logs",
        ("mi325x", "mi325x 256gb"),
    ),
    _amd(
        "mi355x",
        "AMD Instinct MI355X",
        _gib2(287.98),
        "PyTorch 'HIP out of memory ... total capacity of 287.98 GiB' in public logs",
        ("mi355x", "mi355x 288gb"),
    ),
)

# When a short name matches several entries, the one people almost always mean (matched after the
# same normalization as names). Anything not listed stays ambiguous and lists its candidates.
DEFAULT_CHOICES: dict[str, str] = {
    "H100": "h100-sxm-80gb",  # "H100" in cloud catalogs and papers is the 80 GB SXM5 board
    "H100 80GB": "h100-sxm-80gb",
    "H200": "h200-sxm-141gb",  # the HGX (SXM) part; the NVL is named as such
    "H200 141GB": "h200-sxm-141gb",
    "GH200": "gh200-96gb",  # the GH200 480GB superchip (96 GB HBM3) most clouds rent
    "A100 80GB": "a100-sxm-80gb",  # SXM4 is the common 80 GB form (DGX/HGX, p4de, a2-ultragpu)
    "A100 40GB": "a100-sxm-40gb",  # SXM4 is the common 40 GB form (p4d, a2-highgpu)
}

# Words that carry no identity: vendor and product-line prefixes, memory technology, "Generation".
_NOISE = frozenset(
    {
        "nvidia",
        "geforce",
        "tesla",
        "quadro",
        "amd",
        "instinct",
        "radeon",
        "gpu",
        "hbm",
        "hbm2",
        "hbm2e",
        "hbm3",
        "hbm3e",
        "gddr6",
        "gddr6x",
        "gddr7",
        "generation",
        "edition",
        "workstation",
        "card",
        "graphics",
    }
)
_FORM = {
    "sxm2": "sxm",
    "sxm4": "sxm",
    "sxm5": "sxm",
    "sxm6": "sxm",
    "pci": "pcie",
    "pcie4": "pcie",
    "pcie5": "pcie",
}


def _tokens(text: str) -> tuple[str, ...]:
    """'NVIDIA A100-SXM4-80GB' -> ('a100', 'sxm', '80gb'); '80 GB' and '80G' become '80gb'."""
    s = text.lower().replace("pci-e", "pcie").replace("max-q", "maxq")
    s = re.sub(r"(\d+)\s*g(?:i?b)?\b", r"\1gb", s)
    out = []
    for tok in re.split(r"[^a-z0-9]+", s):
        if not tok or tok in _NOISE:
            continue
        out.append(_FORM.get(tok, tok))
    return tuple(out)


def _compact(text: str) -> str:
    return "".join(_tokens(text))


def _build_index() -> tuple[dict[str, Gpu], list[tuple[frozenset[str], Gpu]]]:
    exact: dict[str, Gpu] = {}
    token_sets: list[tuple[frozenset[str], Gpu]] = []
    for gpu in CATALOG:
        for form in (gpu.key, gpu.name, *gpu.aliases):
            compact = _compact(form)
            other = exact.get(compact)
            if other is not None and other.key != gpu.key:
                raise AssertionError(f"GPU alias {form!r} names both {other.key} and {gpu.key}")
            exact[compact] = gpu
            token_sets.append((frozenset(_tokens(form)), gpu))
    return exact, token_sets


_EXACT, _TOKEN_SETS = _build_index()
_DEFAULTS: dict[str, str] = {_compact(query): key for query, key in DEFAULT_CHOICES.items()}
_BY_KEY: dict[str, Gpu] = {gpu.key: gpu for gpu in CATALOG}

_HOW_TO_OVERRIDE = (
    "pass --gpu-memory with the total torch.cuda.mem_get_info() reports (e.g. --gpu-memory 79.19GiB)"
)


def catalog() -> tuple[Gpu, ...]:
    """Every GPU the catalog knows, in a stable order."""
    return CATALOG


@functools.lru_cache(maxsize=512)
def find_gpu(text: str) -> Gpu:
    """A catalog GPU from a name as people write it or nvidia-smi/torch print it.

    Matching ignores case, spaces, dashes and vendor words; "80 GB", "80G" and "80GB" are the same.
    An exact alias match wins; otherwise the query's words must all appear in one entry's name or
    alias. Several hits: a documented default (DEFAULT_CHOICES) or UnknownGpuError listing them.
    """
    query = text.strip()
    if not query:
        raise UnknownGpuError(f"empty GPU name; name one (e.g. --gpu H100) or {_HOW_TO_OVERRIDE}")
    if "mig" in _tokens(query):
        raise UnknownGpuError(
            f"{query!r} is a MIG slice, whose memory depends on the profile; {_HOW_TO_OVERRIDE}"
        )
    compact = _compact(query)
    hit = _EXACT.get(compact)
    if hit is not None:
        return hit
    wanted = frozenset(_tokens(query))
    candidates: dict[str, Gpu] = {}
    if wanted:
        for tokens, gpu in _TOKEN_SETS:
            if wanted <= tokens:
                candidates[gpu.key] = gpu
    if len(candidates) == 1:
        return next(iter(candidates.values()))
    if len(candidates) > 1:
        default = _DEFAULTS.get(compact)
        if default in candidates:
            return candidates[default]
        names = ", ".join(f"{g.key} ({g.name})" for g in candidates.values())
        raise UnknownGpuError(f"GPU name {query!r} is ambiguous: it matches {names}; name one of them")
    raise UnknownGpuError(f"unknown GPU {query!r}{_closest(compact)}; or {_HOW_TO_OVERRIDE}")


def _closest(compact: str) -> str:
    import difflib  # only on the error path

    keys = list(_EXACT)
    close = difflib.get_close_matches(compact, keys, n=8, cutoff=0.5)
    seen: list[str] = []
    for c in close:
        key = _EXACT[c].key
        if key not in seen:
            seen.append(key)
    return f" (closest: {', '.join(seen[:4])})" if seen else ""


# No accelerator comes near this (the largest, unified-memory superchips, hold under 1 TiB); a larger
# total is a slip of the unit or of a digit, and planning it only prints absurd numbers.
MAX_DEVICE_BYTES = 16 * TiB


def gpu_with_memory(total: int | str, name: str | None = None) -> Gpu:
    """A GPU with a user-given total ('79.19GiB', '81559MiB', bytes; a bare number is GiB).

    With a name the catalog knows, its vendor, compute capability and unified-memory flag are kept
    and only the total is replaced; otherwise an NVIDIA discrete GPU of unknown capability.
    """
    total_bytes = parse_bytes(total) if isinstance(total, str) else int(total)
    if total_bytes <= 0:
        raise ConfigError(f"GPU memory must be positive, got {total!r}")
    if total_bytes > MAX_DEVICE_BYTES:
        raise ConfigError(
            f"GPU memory {total!r} is more than any device holds "
            f"({format_gib(MAX_DEVICE_BYTES)}): check the unit"
        )
    base: Gpu | None = None
    if name:
        try:
            base = find_gpu(name)
        except UnknownGpuError:
            base = None
    source = f"given by the user ({format_gib(total_bytes)})"
    if base is not None:
        return Gpu(
            key=base.key,
            name=base.name,
            total_bytes=total_bytes,
            total_source=source,
            vendor=base.vendor,
            compute_capability=base.compute_capability,
            unified_memory=base.unified_memory,
            aliases=base.aliases,
            nvidia_smi_total_mib=base.nvidia_smi_total_mib,
        )
    return Gpu(
        key="custom",
        name=name or f"GPU with {format_gib(total_bytes)}",
        total_bytes=total_bytes,
        total_source=source,
        vendor="nvidia",
        compute_capability=None,
        unified_memory=False,
    )


# --- nvidia-smi ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuReading:
    """One GPU's line of nvidia-smi output. Memory in bytes (nvidia-smi's MiB x 2**20); None = not shown."""

    index: int
    name: str
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    memory_free_bytes: int | None
    utilization_percent: float | None
    lineno: int = 0  # where in the text (from 1), for readers that point at the line

    @property
    def gpu(self) -> Gpu | None:
        """The catalog GPU for this name (CUDA total), else one sized from nvidia-smi's own total."""
        try:
            return find_gpu(self.name)
        except UnknownGpuError:
            pass
        if self.memory_total_bytes is None:
            return None
        mib = self.memory_total_bytes // MiB
        return Gpu(
            key="custom",
            name=self.name,
            total_bytes=self.memory_total_bytes,
            total_source=_SMI_ONLY.format(mib),
            vendor="nvidia",
            compute_capability=None,
            unified_memory=False,
            nvidia_smi_total_mib=mib,
        )


_CSV_FIELDS = {
    "index": "index",
    "name": "name",
    "gpu_name": "name",
    "memory.total": "memory.total",
    "memory.used": "memory.used",
    "memory.free": "memory.free",
    "utilization.gpu": "utilization.gpu",
}
# Headerless CSV: the column order of `--query-gpu=index,name,memory.total,memory.used,memory.free,
# utilization.gpu` (the order nvidia-smi's own help lists them); pass `columns=` for another order.
_DEFAULT_ORDER = ("index", "name", "memory.total", "memory.used", "memory.free", "utilization.gpu")
_NA = {
    "",
    "n/a",
    "[n/a]",
    "[not supported]",
    "not supported",
    "[unknown error]",
    "[insufficient permissions]",
}
# A GPU row of the default table: index, name, persistence (On/Off, or WDDM/TCC on Windows), then the
# bus id. Searched, not anchored, so log prefixes ("(pid=41) |", "# |") are tolerated.
_TABLE_GPU = re.compile(r"\|\s+(\d+)\s+(\S.*?)\s+(?:On|Off|WDDM|TCC)\s+\|\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:")
_TABLE_MEM = re.compile(r"\|\s*(\d+)\s*MiB\s*/\s*(\d+)\s*MiB\s*\|\s*(\d+|N/A)\s*%?")
_GPU_NAME_HINT = re.compile(r"(?i)\b(nvidia|tesla|quadro|geforce|rtx|amd|instinct|radeon)\b")
_MEM_UNITS = {"mib": MiB, "gib": GiB, "kib": 1024, "b": 1, "mb": 1000**2, "gb": 1000**3}


def parse_nvidia_smi(text: str, columns: Sequence[str] | None = None) -> list[GpuReading]:
    """GPUs from nvidia-smi output: `--query-gpu ... --format=csv` (with or without header and units,
    '[N/A]' allowed) or the default table. Raises InputFormatError when no GPU line can be read."""
    if "\x00" in text:
        raise InputFormatError("nvidia-smi input contains binary data (NUL bytes)")
    lines = [ln.rstrip("\r") for ln in text.splitlines()]
    if any(_TABLE_GPU.search(ln) for ln in lines):
        readings = _parse_table(lines)
    else:
        readings = _parse_csv([(no, ln) for no, ln in enumerate(lines, start=1) if ln.strip()], columns)
    if not readings:
        raise InputFormatError(
            "no GPU found in the nvidia-smi input; give the default `nvidia-smi` table or "
            "`nvidia-smi --query-gpu=index,name,memory.total,memory.used,memory.free --format=csv`"
        )
    return readings


def _parse_table(lines: list[str]) -> list[GpuReading]:
    readings: list[GpuReading] = []
    for i, line in enumerate(lines):
        head = _TABLE_GPU.search(line)
        if not head:
            continue
        mem = next((m for m in (_TABLE_MEM.search(ln) for ln in lines[i + 1 : i + 3]) if m), None)
        used = int(mem.group(1)) * MiB if mem else None
        total = int(mem.group(2)) * MiB if mem else None
        util = float(mem.group(3)) if mem and mem.group(3) != "N/A" else None
        readings.append(
            GpuReading(
                index=int(head.group(1)),
                name=head.group(2).strip(),
                memory_total_bytes=total,
                memory_used_bytes=used,
                memory_free_bytes=None,
                utilization_percent=util,
                lineno=i + 1,
            )
        )
    return readings


def _header_columns(first: list[str]) -> list[str] | None:
    """Column names from a CSV header line ('memory.total [MiB]' -> 'memory.total'), or None."""
    names = [re.sub(r"\s*\[.*\]\s*$", "", f).strip().lower() for f in first]
    if any(n in _CSV_FIELDS for n in names) and not any(re.fullmatch(r"\d+", n) for n in names[:1]):
        return [_CSV_FIELDS.get(n, n) for n in names]
    return None


def _parse_csv(numbered: list[tuple[int, str]], columns: Sequence[str] | None) -> list[GpuReading]:
    """CSV rows given with their line numbers (blank lines already dropped)."""
    if not numbered:
        return []
    numbers = [no for no, _ in numbered]
    rows = [[f.strip() for f in ln.split(",")] for _, ln in numbered]
    header = _header_columns(rows[0])
    if header is not None:
        cols, rows, numbers = header, rows[1:], numbers[1:]
    elif columns is not None:
        cols = [_CSV_FIELDS.get(c.strip().lower(), c.strip().lower()) for c in columns]
    else:
        cols = _guess_columns(rows[0])
        for number, row, (_, text) in zip(numbers, rows, numbered):
            name = dict(zip(cols, row)).get("name", "")
            if not _GPU_NAME_HINT.search(name):
                raise InputFormatError(
                    f"line {number} does not look like nvidia-smi output (no GPU name): {text[:80]!r}"
                )
    if "name" not in cols and "memory.total" not in cols:
        raise InputFormatError(
            "nvidia-smi CSV has neither a name nor a memory.total column; query at least "
            "--query-gpu=name,memory.total"
        )
    readings: list[GpuReading] = []
    for number, row in zip(numbers, rows):
        if len(row) != len(cols):
            raise InputFormatError(
                f"nvidia-smi CSV line {number} has {len(row)} fields, expected {len(cols)}: {','.join(row)!r}"
            )
        field = dict(zip(cols, row))
        index_text = field.get("index")
        try:
            index = int(index_text) if index_text not in (None, "") else len(readings)
        except ValueError:
            raise InputFormatError(
                f"nvidia-smi CSV line {number}: index {index_text!r} is not a number"
            ) from None
        readings.append(
            GpuReading(
                index=index,
                name=field.get("name", ""),
                memory_total_bytes=_memory(field.get("memory.total"), number),
                memory_used_bytes=_memory(field.get("memory.used"), number),
                memory_free_bytes=_memory(field.get("memory.free"), number),
                utilization_percent=_percent(field.get("utilization.gpu"), number),
                lineno=number,
            )
        )
    return readings


def _guess_columns(first: list[str]) -> list[str]:
    """Headerless rows: a leading integer is the index, the first non-numeric field the name, then
    the default order; identity fields we do not use (uuid, driver, bus id) are skipped by name."""
    cols: list[str] = []
    order = list(_DEFAULT_ORDER)
    if first and not re.fullmatch(r"\d+", first[0]):
        order.remove("index")
    for value in first:
        low = value.lower()
        if low.startswith("gpu-") or re.fullmatch(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.\d", low):
            cols.append("uuid_or_bus")
        elif re.fullmatch(r"\d+\.\d+(?:\.\d+)?", low):  # driver version; smi memory is integral
            cols.append("driver_version")
        elif order:
            cols.append(order.pop(0))
        else:
            cols.append("unused")
    return cols


def _memory(value: str | None, line: int) -> int | None:
    if value is None or value.strip().lower() in _NA:
        return None
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", value)
    if not m:
        raise InputFormatError(f"nvidia-smi CSV line {line}: cannot read memory {value!r}")
    unit = m.group(2).lower() or "mib"  # `nounits` output is MiB
    if unit not in _MEM_UNITS:
        raise InputFormatError(f"nvidia-smi CSV line {line}: unknown memory unit in {value!r}")
    return round(float(m.group(1)) * _MEM_UNITS[unit])


def _percent(value: str | None, line: int) -> float | None:
    if value is None or value.strip().lower() in _NA:
        return None
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*%?\s*", value)
    if not m:
        raise InputFormatError(f"nvidia-smi CSV line {line}: cannot read utilization {value!r}")
    return float(m.group(1))


@dataclass(frozen=True)
class GpuProcessReading:
    """One process holding GPU memory, from nvidia-smi's process table or `--query-compute-apps` CSV.
    `gpu_index` is None in the CSV (it names GPUs by uuid/bus id, when at all); `lineno` counts from 1."""

    gpu_index: int | None
    pid: int | None
    name: str
    used_bytes: int
    lineno: int


# A row of the default table's "Processes:" section: GPU, [GI CI (N/A or MIG ids)], PID, type, name, usage.
# Drivers before 450 print no GI/CI columns. Searched, so log prefixes are tolerated.
_TABLE_PROCESS = re.compile(
    r"\|\s+(\d+)\s+(?:(?:N/A|\d+)\s+(?:N/A|\d+)\s+)?(\d+)\s+(C\+G|M\+C|C|G|M)\s+(\S.*?)\s+(\d+)\s*MiB\s*\|"
)
# `--query-compute-apps=pid,process_name,used_memory` prints its header as `used_gpu_memory [MiB]`.
_PROCESS_MEMORY_FIELDS = ("used_gpu_memory", "used_memory")


def parse_nvidia_smi_processes(text: str) -> list[GpuProcessReading]:
    """Processes holding GPU memory: rows of the default table's process section, or the CSV of
    `nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv` (header required: the
    columns are whatever was queried). No process is an empty list ("No running processes found")."""
    if "\x00" in text:
        raise InputFormatError("nvidia-smi input contains binary data (NUL bytes)")
    out: list[GpuProcessReading] = []
    cols: list[str] | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        row = _TABLE_PROCESS.search(raw)
        if row:
            out.append(
                GpuProcessReading(
                    int(row.group(1)),
                    int(row.group(2)),
                    row.group(4).strip(),
                    int(row.group(5)) * MiB,
                    lineno,
                )
            )
            continue
        fields = [re.sub(r"\s*\[.*\]\s*$", "", f).strip() for f in raw.split(",")]
        low = [f.lower() for f in fields]
        if "pid" in low and any(m in low for m in _PROCESS_MEMORY_FIELDS):
            cols = low
            continue
        if cols is None or len(fields) != len(cols):
            cols = None if not raw.strip() else cols
            continue
        cell = dict(zip(cols, fields))
        memory = cell.get("used_gpu_memory", cell.get("used_memory"))
        try:
            used = _memory(memory, lineno)
        except InputFormatError:
            used = None
        if used is None:
            continue  # "[N/A]" (no permission to see it) or not a row of this CSV
        pid = cell.get("pid", "")
        out.append(
            GpuProcessReading(
                None,
                int(pid) if pid.isdigit() else None,
                cell.get("process_name", cell.get("name", "")),
                used,
                lineno,
            )
        )
    return out


def gpu_by_key(key: str) -> Gpu:
    """The catalog entry with this exact key (for data files that store keys)."""
    try:
        return _BY_KEY[key]
    except KeyError:
        raise UnknownGpuError(f"no GPU with key {key!r} in the catalog") from None


def resolve_gpu(name: str | None, memory: int | str | None, notes: list[str]) -> Gpu:
    """--gpu NAME and/or --gpu-memory SIZE -> Gpu; neither: the default GPU, said in a note."""
    if name is not None and not name.strip():
        raise UnknownGpuError(
            "--gpu is empty: name a GPU (H100, A100-80GB, L40S ...) or give --gpu-memory 79.19GiB"
        )
    if memory is not None:
        if name and isinstance(memory, str) and memory.strip().replace(".", "", 1).isdigit():
            # `--gpu H100 --gpu-memory 10`: 10 what? A bare number beside a named GPU is most likely a slip.
            raise ConfigError(
                f"--gpu-memory {memory} has no unit beside --gpu {name}: write e.g. {memory.strip()}GiB"
            )
        return gpu_with_memory(memory, name)
    if name:
        return find_gpu(name)
    gpu = find_gpu(DEFAULT_GPU)
    notes.append(f"no --gpu given: planning for one {gpu.name} per rank")
    return gpu
