"""`oomguard diagnose`: from logs, tracebacks and system evidence to the root cause and the flag that fixes
it.

Flow (one way): inputs.py (files, directories, archives, stdin) -> detect.py (what kind of evidence) ->
sources/* (one parser per kind, each emitting typed facts with `source:line`) -> evidence.py (the bounded
store) -> setup.py (the engine setup behind the failure) -> rules.py (causes as mechanisms) ->
remedies.py (fixes with values, via planner.py) -> diagnosis.py (the result) -> render.py.
"""
