"""One parser per evidence kind. Line parsers share one interface (`ANCHORS`, `Parser(ctx).feed(line, msg)`,
`finish()`); whole-document readers (metrics, cgroup files, torch snapshots) have a `read_document`."""
