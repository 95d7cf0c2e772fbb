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


def _count(inv: Inventory, start: int) -> int:
    return sum(t.numel for t in inv.tensors[start:])


def siglip_tower(inv: Inventory, vc: Cfg, prefix: str = "vision_tower.vision_model") -> VisionTower:
    """SigLIP ViT (Gemma-3): conv patch embedding, learned positions, pre-norm blocks, post layernorm."""
    start = len(inv.tensors)
    hidden = vc.int("hidden_size", 1152)
    inter = vc.int("intermediate_size", 4304)
    layers = vc.int("num_hidden_layers", 27)
    patch = vc.int("patch_size", 14)
    image = vc.int("image_size", 224)
    channels = vc.int("num_channels", 3)
    inv.add(f"{prefix}.embeddings.patch_embedding.weight", (hidden, channels, patch, patch), Role.VISION,
            Split.REPLICATED, quantizable=False)
    inv.add(f"{prefix}.embeddings.patch_embedding.bias", (hidden,), Role.VISION, Split.REPLICATED,
            quantizable=False)
    inv.add(f"{prefix}.embeddings.position_embedding.weight", ((image // patch) ** 2, hidden), Role.VISION,
            Split.REPLICATED, quantizable=False)
    for i in range(layers):
        p = f"{prefix}.encoder.layers.{i}"
        _norm(inv, f"{p}.layer_norm1", hidden)
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            _linear(inv, f"{p}.self_attn.{proj}", hidden, hidden)
        _norm(inv, f"{p}.layer_norm2", hidden)
        _linear(inv, f"{p}.mlp.fc1", inter, hidden)
        _linear(inv, f"{p}.mlp.fc2", hidden, inter)
    _norm(inv, f"{prefix}.post_layernorm", hidden)
    return VisionTower(num_params=_count(inv, start), hidden_size=hidden, num_layers=layers)


def pixtral_tower(inv: Inventory, vc: Cfg, text_hidden: int, spatial_merge: int, projector_bias: bool,
                  prefix: str = "vision_tower") -> VisionTower:
    """Pixtral ViT (Mistral-Small-3.1/3.2): conv patches (no bias), RMSNorms, SwiGLU blocks, then the
    patch-merger and a 2-layer projector to the text width."""
    start = len(inv.tensors)
    hidden = vc.int("hidden_size", 1024)
    inter = vc.int("intermediate_size", 4096)
    layers = vc.int("num_hidden_layers", 24)
    patch = vc.int("patch_size", 14)
    channels = vc.int("num_channels", 3)
    inv.add(f"{prefix}.patch_conv.weight", (hidden, channels, patch, patch), Role.VISION, Split.REPLICATED,
            quantizable=False)
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
    _linear(inv, f"{mp}.patch_merger.merging_layer", hidden, hidden * spatial_merge ** 2, bias=False)
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
    inv.add("visual.patch_embed.proj.weight", (hidden, channels, temporal, patch, patch), Role.VISION,
            Split.REPLICATED, quantizable=False)
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
    merged = hidden * merge ** 2
    _norm(inv, "visual.merger.ln_q", hidden, bias=not qwen25)
    _linear(inv, "visual.merger.mlp.0", merged, merged)
    _linear(inv, "visual.merger.mlp.2", out_hidden, merged)
    return VisionTower(num_params=_count(inv, start), hidden_size=hidden, num_layers=depth)
