"""The pieces every family reader shares: a typed view of config.json, the headline numbers, a
tensor-inventory
builder, the registry.

A family reader turns one config.json (already unwrapped to its text part for multimodal checkpoints) into
`FamilyFacts`: the headline numbers (`DecoderShape`), the decoder layers and the tensor inventory.
`hf_config.py` adds the
parts that do not depend on the family (dtype, quantization, name) and freezes the result into a ModelSpec.
Tensor names are the checkpoint's own (Hugging Face layout), so safetensors headers can be matched by name;
a stacked routed-expert tensor writes `*` where the expert index goes.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from oomguard.errors import ConfigError
from oomguard.models.spec import (
    DecoderLayer,
    Role,
    Split,
    TensorSpec,
    VisionTower,
)

# Sanity bounds on config.json integers, far above any real checkpoint (the largest real values: 10,485,760
# max_position_embeddings, 262,144 vocab; about 130 decoder layers): a layer becomes objects, so a
# corrupted count of 10**30 must stop here rather than exhaust memory.
MAX_CONFIG_INT = 2**40
MAX_CONFIG_LAYERS = 10_000

# vLLM `ModelConfig` fallback when a config has no max_position_embeddings (vllm/config/model.py).
DEFAULT_MAX_POSITIONS = 2048


class Cfg:
    """Typed, read-only access to one config.json dict; a missing or mistyped key is a one-line
    ConfigError."""

    def __init__(self, data: Mapping[builtins.str, Any], where: builtins.str = "config.json") -> None:
        self.data = data
        self.where = where

    def has(self, key: builtins.str) -> bool:
        return self.data.get(key) is not None

    def raw(self, key: builtins.str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value

    def int(self, key: builtins.str, default: builtins.int | None = None) -> builtins.int:
        value = self.data.get(key)
        if value is None:
            if default is None:
                raise ConfigError(f"{self.where}: required key {key!r} is missing")
            return default
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or int(value) != value
            or value < 0
        ):
            raise ConfigError(f"{self.where}: {key!r} must be a non-negative integer, got {value!r}")
        limit = MAX_CONFIG_LAYERS if "layers" in key else MAX_CONFIG_INT
        if value > limit:
            raise ConfigError(
                f"{self.where}: {key!r} = {value!r} is beyond any real model (at most {limit:,})"
            )
        return int(value)

    def positive(self, key: builtins.str, default: builtins.int | None = None) -> builtins.int:
        """A count or width that no model has zero of (hidden size, layers, heads, vocabulary)."""
        value = self.int(key, default)
        if value == 0:
            raise ConfigError(f"{self.where}: {key!r} must be positive, got 0")
        return value

    def opt_int(self, key: builtins.str) -> builtins.int | None:
        return None if self.data.get(key) is None else self.int(key)

    def float(self, key: builtins.str, default: float) -> float:
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{self.where}: {key!r} must be a number, got {value!r}")
        try:
            number = float(value)
        except OverflowError:  # an integer such as 10**400
            number = math.inf
        if not math.isfinite(number):
            raise ConfigError(f"{self.where}: {key!r} must be a finite number, got {value!r}")
        return number

    def bool(self, key: builtins.str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ConfigError(f"{self.where}: {key!r} must be true or false, got {value!r}")
        return value

    def str(self, key: builtins.str, default: builtins.str = "") -> builtins.str:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise ConfigError(f"{self.where}: {key!r} must be a string, got {value!r}")
        return value

    def list(self, key: builtins.str) -> builtins.list[Any] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise ConfigError(f"{self.where}: {key!r} must be a list, got {type(value).__name__}")
        return value

    def sub(self, key: builtins.str) -> Cfg | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise ConfigError(f"{self.where}: {key!r} must be an object, got {type(value).__name__}")
        return Cfg(value, f"{self.where}:{key}")

    def head_dim(self) -> builtins.int:
        """Explicit `head_dim` when given (Qwen3, Gemma, Mistral-Small: it can differ from hidden/heads)."""
        explicit = self.opt_int("head_dim")
        if explicit:
            return explicit
        return self.hidden_over_heads()

    def hidden_over_heads(self) -> builtins.int:
        """hidden_size / num_attention_heads, for families whose vLLM attention ignores any `head_dim` key."""
        heads = self.int("num_attention_heads")
        if heads == 0:
            raise ConfigError(f"{self.where}: 'num_attention_heads' must be positive")
        return self.int("hidden_size") // heads

    def kv_heads(self) -> builtins.int:
        return self.positive("num_key_value_heads", self.int("num_attention_heads"))

    def max_positions(self) -> builtins.int:
        return self.positive("max_position_embeddings", DEFAULT_MAX_POSITIONS)


@dataclass(frozen=True)
class DecoderShape:
    """The headline numbers of a decoder, named as ModelSpec names them."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int


def decoder_shape(
    cfg: Cfg, *, tied_default: bool, head_dim: Callable[[Cfg], int] = Cfg.head_dim, intermediate: bool = True
) -> DecoderShape:
    """The headline numbers as most configs spell them. `tied_default` is the family's config-class default
    for
    tie_word_embeddings (configs often leave it out); `head_dim` says how the family finds the head size;
    `intermediate` False for families without one dense width (0 then: the reader fills it in)."""
    return DecoderShape(
        hidden_size=cfg.positive("hidden_size"),
        num_hidden_layers=cfg.positive("num_hidden_layers"),
        num_attention_heads=cfg.positive("num_attention_heads"),
        num_key_value_heads=cfg.kv_heads(),
        head_dim=head_dim(cfg),
        intermediate_size=cfg.int("intermediate_size") if intermediate else 0,
        vocab_size=cfg.positive("vocab_size"),
        tie_word_embeddings=cfg.bool("tie_word_embeddings", tied_default),
        max_position_embeddings=cfg.max_positions(),
    )


@dataclass
class Inventory:
    """Accumulates TensorSpecs in checkpoint order."""

    tensors: list[TensorSpec] = field(default_factory=list)

    def add(
        self,
        name: str,
        shape: tuple[int, ...],
        role: Role,
        split: Split,
        layer: int | None = None,
        *,
        experts: int = 0,
        quantizable: bool = True,
        kv_heads: int = 0,
        shard_dim: int | None = None,
        groups: int = 0,
        group_rows: int = 0,
    ) -> None:
        self.tensors.append(
            TensorSpec(
                name=name,
                shape=shape,
                role=role,
                split=split,
                layer=layer,
                experts=experts,
                quantizable=quantizable,
                kv_heads=kv_heads,
                shard_dim=shard_dim,
                groups=groups,
                group_rows=group_rows,
            )
        )

    def norm(
        self, name: str, width: int, layer: int | None, role: Role = Role.NORM, bias: bool = False
    ) -> None:
        self.add(f"{name}.weight", (width,), role, Split.REPLICATED, layer, quantizable=False)
        if bias:
            self.add(f"{name}.bias", (width,), role, Split.REPLICATED, layer, quantizable=False)

    def linear(
        self,
        name: str,
        out_features: int,
        in_features: int,
        role: Role,
        split: Split,
        layer: int | None,
        *,
        bias: bool = False,
        kv_heads: int = 0,
        quantizable: bool = True,
    ) -> None:
        """A Linear's weight ([out, in], as PyTorch stores it) and its optional bias.

        NOTE: a row-parallel layer's bias is added once after the all-reduce, so vLLM replicates it."""
        self.add(
            f"{name}.weight",
            (out_features, in_features),
            role,
            split,
            layer,
            kv_heads=kv_heads,
            quantizable=quantizable,
        )
        if bias:
            bias_split = Split.REPLICATED if split in (Split.ROW, Split.REPLICATED) else split
            self.add(
                f"{name}.bias", (out_features,), role, bias_split, layer, kv_heads=kv_heads, quantizable=False
            )

    def embedding(self, name: str, vocab: int, hidden: int, role: Role = Role.EMBEDDING) -> None:
        self.add(name, (vocab, hidden), role, Split.VOCAB, None, quantizable=False)

    def experts(
        self,
        name: str,
        shape: tuple[int, int],
        num_experts: int,
        layer: int,
        *,
        row: bool,
        role: Role = Role.EXPERTS,
    ) -> None:
        """A routed expert weight stacked over experts; without EP vLLM shards its intermediate dim over TP
        (dim 0 of gate/up, dim 1 of down), with EP it places whole experts."""
        self.add(name, shape, role, Split.EXPERT, layer, experts=num_experts, shard_dim=1 if row else 0)


@dataclass
class FamilyFacts:
    """What a family reader knows; hf_config.py turns it into a ModelSpec."""

    shape: DecoderShape
    layers: list[DecoderLayer]
    inventory: Inventory
    rotary_dim: int = 0
    rope_caches: tuple[tuple[int, int], ...] = ()
    vision: VisionTower | None = None
    mtp_layers: int = 0
    notes: list[str] = field(default_factory=list)


FamilyReader = Callable[[Cfg], FamilyFacts]

# model_type -> reader. Filled by the @family decorator in each families/*.py module.
FAMILY_READERS: dict[str, FamilyReader] = {}


def family(*model_types: str) -> Callable[[FamilyReader], FamilyReader]:
    """Register a reader for one or more config.json `model_type` values."""

    def register(reader: FamilyReader) -> FamilyReader:
        for model_type in model_types:
            FAMILY_READERS[model_type] = reader
        return reader

    return register
