"""A text as a user pastes it, read and diagnosed the way `oomguard diagnose` reads one document: the helpers
the diagnosis tests share."""

from __future__ import annotations

import io

from oomguard.diagnosis.diagnosis import diagnose
from oomguard.diagnosis.evidence import Evidence
from oomguard.diagnosis.read import read_one, require_evidence


def read(text: str, name: str = "paste.txt") -> Evidence:
    """The facts of one pasted document (the document's own record kept, as the CLI keeps it)."""
    evidence = Evidence()
    evidence.documents.append(read_one(name, io.BytesIO(text.encode()), evidence))
    return evidence


def ranked(text: str, name: str = "paste.txt") -> list[str]:
    """The causes `diagnose` ranks for the text, first first (InputFormatError: nothing shows a failure)."""
    evidence = read(text, name)
    require_evidence(evidence)
    return [c.cls for c in diagnose(evidence).causes]
