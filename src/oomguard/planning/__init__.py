"""The planner's public API: `plan(PlanRequest(...)) -> Plan`."""

from oomguard.planning.planner import KvPlan, Plan, PlanRequest, RankLedger, plan

__all__ = ["KvPlan", "Plan", "PlanRequest", "RankLedger", "plan"]
