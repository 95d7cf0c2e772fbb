"""YAML written by users (vLLM `--config` files, Kubernetes manifests), read so that no document can hurt us.

`yaml.safe_load` already builds only plain data (no `!!python/...` objects). What it still allows:
- aliases that expand exponentially ("billion laughs": 9 levels of 9 aliases = 387 million strings, built in
  a millisecond as shared references, but any walk or `str()` of them never ends);
- a document that contains itself (`a: &a [*a]`), which makes every recursive walk recurse forever;
- nesting thousands of levels deep, which exhausts the parser's stack (RecursionError).
Each is refused here with one line, before any caller walks the data.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from oomguard.errors import OomguardError

# A Kubernetes manifest or vLLM config holds hundreds of values; a million is far beyond any real one and
# still walks in well under a second.
MAX_EXPANDED_VALUES = 1_000_000
# Kubernetes manifests nest about 15 levels; the C loader builds any depth, which would break every later
# recursive walk (and the pure-Python loader's stack), so deeper documents are refused here.
MAX_DEPTH = 200
# Building a node costs the loader ~30 us and ~500 bytes (a 500,000-key mapping, 1M nodes: ~15 s, ~500 MB);
# a 2,000-document Kubernetes manifest holds ~60,000. Counted on the parser's event stream, which builds
# nothing, before any document is constructed.
MAX_NODES = 500_000
# Texts smaller than this cannot hold MAX_NODES (a node takes at least 2 bytes): no need to count.
COUNT_NODES_FROM_BYTES = 1 << 20


def load_yaml_documents(text: str, where: str, error: type[OomguardError]) -> list[Any]:
    """Every document of a YAML stream, as plain data; any problem is `error` naming `where`."""
    import yaml  # deferred: only YAML inputs need it

    try:
        # The C loader (libyaml) when PyYAML was built with it: ~100x faster on large inputs, same safety.
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        if len(text) >= COUNT_NODES_FROM_BYTES:
            _check_node_count(yaml.parse(text, Loader=loader), where, error)
        documents = list(yaml.load_all(text, Loader=loader))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise error(
            f"{where} is not valid YAML" + (f" (line {mark.line + 1})" if mark is not None else "")
        ) from None
    except RecursionError:
        raise error(f"{where}: YAML nested too deeply to be a configuration") from None
    for document in documents:
        _check_size(document, where, error)
    return documents


def load_yaml(text: str, where: str, error: type[OomguardError]) -> Any:
    """The one document of a YAML file (None when empty); several documents are an error."""
    documents = load_yaml_documents(text, where, error)
    if len(documents) > 1:
        raise error(f"{where}: expected one YAML document, found {len(documents)}")
    return documents[0] if documents else None


def _check_node_count(events: Iterator[Any], where: str, error: type[OomguardError]) -> None:
    """Refuse more than MAX_NODES values (scalars, aliases, collections), counting the parser's events."""
    import yaml

    nodes = (yaml.ScalarEvent, yaml.AliasEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent)
    count = 0
    for event in events:
        if isinstance(event, nodes):
            count += 1
            if count > MAX_NODES:
                raise error(
                    f"{where}: YAML holds more than {MAX_NODES:,} values, "
                    "far beyond any configuration or manifest"
                )


def _check_size(document: Any, where: str, error: type[OomguardError]) -> None:
    """Count the values a full walk would visit (aliases counted each time), refusing cycles and bombs.

    Shared nodes are counted once per reference but computed once (memo by identity), so the check itself
    costs only the distinct nodes, never the expansion.
    """
    expanded: dict[int, int] = {}
    in_progress: set[int] = set()
    stack: list[tuple[Any, bool, int]] = [(document, False, 0)]
    while stack:
        node, children_done, depth = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        key = id(node)
        if children_done:
            children = list(node.keys()) + list(node.values()) if isinstance(node, dict) else node
            total = 1 + sum(expanded.get(id(c), 1) if isinstance(c, (dict, list)) else 1 for c in children)
            in_progress.discard(key)
            expanded[key] = total
            if total > MAX_EXPANDED_VALUES:
                raise error(
                    f"{where}: YAML aliases expand to more than {MAX_EXPANDED_VALUES:,} values "
                    "(an alias bomb?); write the values out"
                )
            continue
        if key in expanded:
            continue
        if key in in_progress:
            raise error(f"{where}: YAML document refers to itself through an alias (&anchor inside itself)")
        if depth > MAX_DEPTH:
            raise error(f"{where}: YAML nested too deeply to be a configuration")
        in_progress.add(key)
        stack.append((node, True, depth))
        children = list(node.values()) if isinstance(node, dict) else node
        stack.extend((child, False, depth + 1) for child in children if isinstance(child, (dict, list)))
