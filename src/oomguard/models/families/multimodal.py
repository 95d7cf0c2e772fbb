"""Multimodal wrappers: a text decoder from one of the dense families plus the vision tower it ships with.

Mistral-Small-3.1/3.2 (mistral3: Mistral text + Pixtral), Qwen2-VL and Qwen2.5-VL (Qwen2 text + their ViT).
"""

from __future__ import annotations

from oomguard.models.families.base import Cfg, FamilyFacts, family
from oomguard.models.families.llama import read_dense
from oomguard.models.families.vision import pixtral_tower, qwen2_vl_tower


@family("mistral3")
def read_mistral3(cfg: Cfg) -> FamilyFacts:
    text = cfg.sub("text_config") or Cfg({}, f"{cfg.where}:text_config")
    facts = read_dense(text, "mistral")
    vision = cfg.sub("vision_config")
    if vision is not None:
        facts.vision = pixtral_tower(
            facts.inventory,
            vision,
            facts.shape.hidden_size,
            cfg.int("spatial_merge_size", 2),
            cfg.bool("multimodal_projector_bias", False),
        )
    return facts


def _qwen_vl(cfg: Cfg, qwen25: bool) -> FamilyFacts:
    # NOTE: Qwen2-VL configs keep the text fields at the top level; transformers >= 4.52 moves them into
    # text_config. Either way the decoder is Qwen2 with M-RoPE.
    text = cfg.sub("text_config") or cfg
    facts = read_dense(text, "qwen2")
    vision = cfg.sub("vision_config")
    if vision is not None:
        facts.vision = qwen2_vl_tower(facts.inventory, vision, facts.shape.hidden_size, qwen25)
    return facts


@family("qwen2_vl")
def read_qwen2_vl(cfg: Cfg) -> FamilyFacts:
    return _qwen_vl(cfg, qwen25=False)


@family("qwen2_5_vl")
def read_qwen2_5_vl(cfg: Cfg) -> FamilyFacts:
    return _qwen_vl(cfg, qwen25=True)
