"""Planning for every engine: the neutral request (`oomguard.request.Request`) dispatched by command to an
engine under `engines/`, the one fix-search loop, and the neutral result (`oomguard.result.PlanResult`).

`plan(PlanRequest(...)) -> Plan` is vLLM's own planner (engines/vllm/plan.py), kept here under the names
callers have used since the first release.
"""

from oomguard.engines.vllm.plan import KvPlan, Plan, PlanRequest, RankLedger, plan
from oomguard.planning.dispatch import engine_for, plan_result
from oomguard.request import Request
from oomguard.result import PlanResult

__all__ = [
    "KvPlan",
    "Plan",
    "PlanRequest",
    "PlanResult",
    "RankLedger",
    "Request",
    "engine_for",
    "plan",
    "plan_result",
]
