"""Vision towers that ship inside multimodal checkpoints, counted from their vision_config.

Their tensors are added to the inventory under Role.VISION and placed whole on every rank (vLLM replicates
several encoders across TP, e.g. Pixtral in Mistral-Small-3.1: measured weights per GPU drop by the text
part only). Names follow the original Hugging Face layouts so safetensors headers match them.
"""

from __future__ import annotations

from oomguard.models.families.base import Cfg, Inventory
from oomguard.models.spec import Role, Split, VisionTower


def _linear(inv: Inventory, name: str, out_f: int, in_f: int, bias: bool = True) -> None:
    inv.linear(name, out_f, in_f, Role.VISION, Split.REPLICATED, None, bias=bias, quantizable=False)


def _norm(inv: Inventory, name: str, width: int, bias: bool = True) -> None:
    inv.norm(name, width, None, Role.VISION, bias=bias)


def _tensor(inv: Inventory, name: str, shape: tuple[int, ...]) -> None:
    inv.add(name, shape, Role.VISION, Split.REPLICATED, quantizable=False)


def _count(inv: Inventory, start: int) -> int:
    return sum(t.numel for t in inv.tensors[start:])


def _vit_blocks(
    inv: Inventory, prefix: str, layers: int, hidden: int, inter: int, *, norms: tuple[str, str], o_proj: str
) -> None:
    """Pre-norm ViT blocks `{prefix}.{i}` as SigLIP and Llama-4 store them: a LayerNorm, q/k/v/o with biases
    (`self_attn`), a LayerNorm, then a GELU MLP fc1/fc2 with biases."""
    for i in range(layers):
        p = f"{prefix}.{i}"
        _norm(inv, f"{p}.{norms[0]}", hidden)
        for proj in ("q_proj", "k_proj", "v_proj", o_proj):
            _linear(inv, f"{p}.self_attn.{proj}", hidden, hidden)
        _norm(inv, f"{p}.{norms[1]}", hidden)
        _linear(inv, f"{p}.mlp.fc1", inter, hidden)
        _linear(inv, f"{p}.mlp.fc2", hidden, inter)


def siglip_tower(inv: Inventory, vc: Cfg, prefix: str = "vision_tower.vision_model") -> VisionTower:
    """SigLIP ViT (Gemma-3): conv patch embedding, learned positions, pre-norm blocks, post layernorm."""
    start = len(inv.tensors)
    hidden = vc.int("hidden_size", 1152)
    inter = vc.int("intermediate_size", 4304)
    layers = vc.int("num_hidden_layers", 27)
    patch = vc.int("patch_size", 14)
    image = vc.int("image_size", 224)
    channels = vc.int("num_channels", 3)
    _tensor(inv, f"{prefix}.embeddings.patch_embedding.weight", (hidden, channels, patch, patch))
    _tensor(inv, f"{prefix}.embeddings.patch_embedding.bias", (hidden,))
    _tensor(inv, f"{prefix}.embeddings.position_embedding.weight", ((image // patch) ** 2, hidden))
    _vit_blocks(
        inv,
        f"{prefix}.encoder.layers",
        layers,
        hidden,
        inter,
        norms=("layer_norm1", "layer_norm2"),
        o_proj="out_proj",
    )
    _norm(inv, f"{prefix}.post_layernorm", hidden)
    return VisionTower(num_params=_count(inv, start), hidden_size=hidden, num_layers=layers)


def gemma3_tower(inv: Inventory, vc: Cfg, text_hidden: int, tokens_per_item: int) -> VisionTower:
    """Gemma-3: the SigLIP tower, then a projection matrix to the text width and a soft-embedding RMSNorm."""
    start = len(inv.tensors)
    tower = siglip_tower(inv, vc)
    _tensor(inv, "multi_modal_projector.mm_input_projection_weight", (tower.hidden_size, text_hidden))
    _norm(inv, "multi_modal_projector.mm_soft_emb_norm", tower.hidden_size, bias=False)
    return VisionTower(
        num_params=_count(inv, start),
        hidden_size=tower.hidden_size,
        num_layers=tower.num_layers,
        tokens_per_item=tokens_per_item,
    )


def pixtral_tower(
    inv: Inventory,
    vc: Cfg,
    text_hidden: int,
    spatial_merge: int,
    projector_bias: bool,
    prefix: str = "vision_tower",
) -> VisionTower:
    """Pixtral ViT (Mistral-Small-3.1/3.2): conv patches (no bias), RMSNorms, SwiGLU blocks, then the
    patch-merger and a 2-layer projector to the text width."""
    start = len(inv.tensors)
    hidden = vc.int("hidden_size", 1024)
    inter = vc.int("intermediate_size", 4096)
    layers = vc.int("num_hidden_layers", 24)
    patch = vc.int("patch_size", 14)
    channels = vc.int("num_channels", 3)
    _tensor(inv, f"{prefix}.patch_conv.weight", (hidden, channels, patch, patch))
    _norm(inv, f"{prefix}.ln_pre", hidden, bias=False)
    for i in range(layers):
        p = f"{prefix}.transformer.layers.{i}"
        _norm(inv, f"{p}.attention_norm", hidden, bias=False)
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            _linear(inv, f"{p}.attention.{proj}", hidden, hidden, bias=False)
        _norm(inv, f"{p}.ffn_norm", hidden, bias=False)
        _linear(inv, f"{p}.feed_forward.gate_proj", inter, hidden, bias=False)
        _linear(inv, f"{p}.feed_forward.up_proj", inter, hidden, bias=False)
        _linear(inv, f"{p}.feed_forward.down_proj", hidden, inter, bias=False)
    mp = "multi_modal_projector"
    _norm(inv, f"{mp}.norm", hidden, bias=False)
    _linear(inv, f"{mp}.patch_merger.merging_layer", hidden, hidden * spatial_merge**2, bias=False)
    _linear(inv, f"{mp}.linear_1", text_hidden, hidden, bias=projector_bias)
    _linear(inv, f"{mp}.linear_2", text_hidden, text_hidden, bias=projector_bias)
    return VisionTower(num_params=_count(inv, start), hidden_size=hidden, num_layers=layers)


def qwen2_vl_tower(inv: Inventory, vc: Cfg, text_hidden: int, qwen25: bool) -> VisionTower:
    """Qwen2-VL / Qwen2.5-VL ViT: 3-D conv patches (temporal 2), fused qkv, merger MLP to the text width.
    Qwen2-VL blocks use LayerNorm + GELU MLP (embed_dim x mlp_ratio); Qwen2.5-VL uses RMSNorm + SwiGLU."""
    start = len(inv.tensors)
    depth = vc.int("depth", 32)
    hidden = vc.int("hidden_size" if qwen25 else "embed_dim", 1280)
    patch = vc.int("patch_size", 14)
    temporal = vc.int("temporal_patch_size", 2)
    channels = vc.int("in_chans", vc.int("in_channels", 3))
    merge = vc.int("spatial_merge_size", 2)
    out_hidden = vc.int("out_hidden_size", text_hidden) if qwen25 else vc.int("hidden_size", text_hidden)
    inter = vc.int("intermediate_size", 3420) if qwen25 else int(hidden * vc.float("mlp_ratio", 4.0))
    _tensor(inv, "visual.patch_embed.proj.weight", (hidden, channels, temporal, patch, patch))
    for i in range(depth):
        p = f"visual.blocks.{i}"
        _norm(inv, f"{p}.norm1", hidden, bias=not qwen25)
        _linear(inv, f"{p}.attn.qkv", 3 * hidden, hidden)
        _linear(inv, f"{p}.attn.proj", hidden, hidden)
        _norm(inv, f"{p}.norm2", hidden, bias=not qwen25)
        if qwen25:
            _linear(inv, f"{p}.mlp.gate_proj", inter, hidden)
            _linear(inv, f"{p}.mlp.up_proj", inter, hidden)
            _linear(inv, f"{p}.mlp.down_proj", hidden, inter)
        else:
            _linear(inv, f"{p}.mlp.fc1", inter, hidden)
            _linear(inv, f"{p}.mlp.fc2", hidden, inter)
    merged = hidden * merge**2
    _norm(inv, "visual.merger.ln_q", hidden, bias=not qwen25)
    _linear(inv, "visual.merger.mlp.0", merged, merged)
    _linear(inv, "visual.merger.mlp.2", out_hidden, merged)
    return VisionTower(num_params=_count(inv, start), hidden_size=hidden, num_layers=depth)


def llama4_tower(inv: Inventory, vc: Cfg, text_hidden: int) -> VisionTower:
    """Llama-4 ViT: linear patch embedding, class token and positions, pre/post LayerNorms around pre-norm
    blocks,
    then the pixel-shuffle adapter MLP and a projector to the text width."""
    start = len(inv.tensors)
    hidden = vc.int("hidden_size", 1408)
    inter = vc.int("intermediate_size", 5632)
    layers = vc.int("num_hidden_layers", 34)
    patch = vc.int("patch_size", 14)
    image = vc.int("image_size", 336)
    channels = vc.int("num_channels", 3)
    ratio = vc.float("pixel_shuffle_ratio", 0.5)
    # NOTE: pixel shuffle folds ratio^-2 patches into one token before the adapter.
    adapter_in = int(hidden / (ratio * ratio))
    adapter_dim = vc.int("projector_input_dim", 4096)
    adapter_out = vc.int("projector_output_dim", 4096)
    p = "vision_model"
    _linear(inv, f"{p}.patch_embedding.linear", hidden, channels * patch * patch, bias=False)
    _tensor(inv, f"{p}.class_embedding", (hidden,))
    _tensor(inv, f"{p}.positional_embedding_vlm", ((image // patch) ** 2 + 1, hidden))
    _norm(inv, f"{p}.layernorm_pre", hidden)
    _norm(inv, f"{p}.layernorm_post", hidden)
    _vit_blocks(
        inv,
        f"{p}.model.layers",
        layers,
        hidden,
        inter,
        norms=("input_layernorm", "post_attention_layernorm"),
        o_proj="o_proj",
    )
    _linear(inv, f"{p}.vision_adapter.mlp.fc1", adapter_dim, adapter_in, bias=False)
    _linear(inv, f"{p}.vision_adapter.mlp.fc2", adapter_out, adapter_dim, bias=False)
    _linear(inv, "multi_modal_projector.linear_1", text_hidden, adapter_out, bias=False)
    return VisionTower(num_params=_count(inv, start), hidden_size=hidden, num_layers=layers)


def gemma4_tower(
    inv: Inventory, vc: Cfg, text_hidden: int, tokens_per_item: int, prefix: str = "model.vision_tower"
) -> VisionTower:
    """Gemma 4 vision encoder: a linear patch embedding, a 2 x positions x hidden position table, blocks with
    q/k norms and four RMSNorms around a GeGLU MLP, then a bias-free projection to the text width."""
    start = len(inv.tensors)
    hidden = vc.int("hidden_size")
    inter = vc.int("intermediate_size")
    layers = vc.int("num_hidden_layers")
    heads = vc.int("num_attention_heads")
    kv_heads = vc.int("num_key_value_heads", heads)
    head_dim = vc.int("head_dim", hidden // max(1, heads))
    patch = vc.int("patch_size", 16)
    positions = vc.int("position_embedding_size")
    _linear(inv, f"{prefix}.patch_embedder.input_proj", hidden, 3 * patch * patch, bias=False)
    _tensor(inv, f"{prefix}.patch_embedder.position_embedding_table", (2, positions, hidden))
    for i in range(layers):
        p = f"{prefix}.encoder.layers.{i}"
        # NOTE: each projection is a clippable linear (`.linear.weight` plus scalar clip bounds, not counted).
        _linear(inv, f"{p}.self_attn.q_proj.linear", heads * head_dim, hidden, bias=False)
        _linear(inv, f"{p}.self_attn.k_proj.linear", kv_heads * head_dim, hidden, bias=False)
        _linear(inv, f"{p}.self_attn.v_proj.linear", kv_heads * head_dim, hidden, bias=False)
        _linear(inv, f"{p}.self_attn.o_proj.linear", hidden, heads * head_dim, bias=False)
        _norm(inv, f"{p}.self_attn.q_norm", head_dim, bias=False)
        _norm(inv, f"{p}.self_attn.k_norm", head_dim, bias=False)
        for norm in (
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
        ):
            _norm(inv, f"{p}.{norm}", hidden, bias=False)
        for proj, out_f, in_f in (
            ("gate_proj", inter, hidden),
            ("up_proj", inter, hidden),
            ("down_proj", hidden, inter),
        ):
            _linear(inv, f"{p}.mlp.{proj}.linear", out_f, in_f, bias=False)
    _linear(inv, "model.embed_vision.embedding_projection", text_hidden, hidden, bias=False)
    return VisionTower(
        num_params=_count(inv, start), hidden_size=hidden, num_layers=layers, tokens_per_item=tokens_per_item
    )
