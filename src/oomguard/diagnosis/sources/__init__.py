"""One parser per evidence kind. Line parsers share one interface (`Parser(ctx).feed(line, msg)`, `finish()`);
whole-document readers (metrics, cgroup files, torch snapshots) have a `read_document`. Which lines of a large
log reach the line parsers is decided once, by the gates in read.py."""
