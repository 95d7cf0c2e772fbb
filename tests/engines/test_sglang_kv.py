"""SGLang's pool arithmetic: the cell per token (MHA, MLA, SWA), the pool size, SWA split, request
defaults."""

from __future__ import annotations

from oomguard.engines.sglang import kv
from oomguard.engines.sglang.config import reserved_mib, resolve_config
from oomguard.engines.sglang.flags import parse_launch_command
from oomguard.hardware import find_gpu
from oomguard.models.resolve import resolve_model


def _cfg(model: str, flags: str = "", gpu: str = "H100"):  # type: ignore[no-untyped-def]
    spec = resolve_model(model)
    args = parse_launch_command(f"python -m sglang.launch_server --model-path {model} {flags}")
    return spec, resolve_config(args, spec, find_gpu(gpu))


def test_mha_cell_is_heads_times_k_plus_v_times_layers_times_bytes() -> None:
    spec, cfg = _cfg("meta-llama/Llama-3.1-8B-Instruct")
    pool = kv.token_pool(spec, cfg, range(spec.num_hidden_layers))
    assert pool.cell_bytes == 8 * (128 + 128) * 32 * 2


def test_kv_heads_split_over_tp_but_never_below_one() -> None:
    spec, cfg = _cfg("Qwen/Qwen3-235B-A22B", "--tp 8")
    pool = kv.token_pool(spec, cfg, range(spec.num_hidden_layers))
    assert pool.cell_bytes == 1 * (128 + 128) * spec.num_hidden_layers * 2  # 4 KV heads over 8 GPUs


def test_mla_cell_is_one_latent_not_split_by_tp() -> None:
    spec, cfg = _cfg("deepseek-ai/DeepSeek-V3", "--tp 8")
    pool = kv.token_pool(spec, cfg, range(spec.num_hidden_layers))
    assert pool.is_mla
    assert pool.cell_bytes == (512 + 64) * spec.num_hidden_layers * int(spec.dtype_bytes)


def test_fp8_kv_halves_the_cell() -> None:
    spec, auto = _cfg("meta-llama/Llama-3.1-8B-Instruct")
    _, fp8 = _cfg("meta-llama/Llama-3.1-8B-Instruct", "--kv-cache-dtype fp8_e4m3")
    layers = range(spec.num_hidden_layers)
    assert kv.token_pool(spec, fp8, layers).cell_bytes * 2 == kv.token_pool(spec, auto, layers).cell_bytes


def test_swa_split_keeps_the_bytes_and_the_ratio() -> None:
    spec, cfg = _cfg("google/gemma-3-12b-it")
    pool = kv.token_pool(spec, cfg, range(spec.num_hidden_layers))
    assert pool.is_hybrid_swa
    split = kv.swa_split(100_000, pool, cfg)
    assert abs(split.swa_tokens - cfg.swa_full_tokens_ratio * split.full_tokens) <= 1
    spent = split.full_tokens * pool.bytes_of("full") + split.swa_tokens * pool.bytes_of("sliding_window")
    assert spent <= 100_000 * pool.cell_bytes < spent + 2 * pool.cell_bytes


def test_pool_is_rest_over_cell_capped_and_page_aligned() -> None:
    spec, cfg = _cfg("meta-llama/Llama-3.1-8B-Instruct", "--page-size 16 --max-total-tokens 100000")
    pool = kv.token_pool(spec, cfg, range(spec.num_hidden_layers))
    profiled = kv.profiled_tokens(10 * pool.cell_bytes * 1000 + 5, pool)
    assert profiled == 10_000
    assert kv.max_total_num_tokens(profiled, cfg) == 10_000 // 16 * 16
    assert kv.max_total_num_tokens(200_000, cfg) == 100_000


def test_default_running_requests_bounds() -> None:
    assert kv.default_max_running_requests(1_000, 8192) == 2048
    assert kv.default_max_running_requests(10_000_000, 8192) == 4096
    assert kv.default_max_running_requests(6 * 8192, 8192) == 6 * 512


def test_default_fraction_on_an_h100_follows_sglangs_reserve() -> None:
    _, cfg = _cfg("meta-llama/Llama-3.1-8B-Instruct")
    assert (cfg.chunked_prefill_size, cfg.cuda_graph_max_bs) == (8192, 256)
    reserved = 512 + 1.5 * 8192 + 2 * 256 + 1 / 8 * 1024
    assert reserved_mib(cfg) == reserved
    assert cfg.mem_fraction_static == round((cfg.gpu_capacity_mib - reserved) / cfg.gpu_capacity_mib, 3)


def test_small_gpus_get_small_defaults_and_tp4_more_graphs() -> None:
    _, l4 = _cfg("Qwen/Qwen3-0.6B", gpu="L4")
    assert (l4.chunked_prefill_size, l4.cuda_graph_max_bs) == (2048, 24)
    _, tp4 = _cfg("Qwen/Qwen3-0.6B", "--tp 4", gpu="L4")
    assert tp4.cuda_graph_max_bs == 80
