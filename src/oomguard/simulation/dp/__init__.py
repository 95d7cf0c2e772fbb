"""Data-parallel serving: one scheduler and KV pool per DP rank, a load balancer in front, MoE ranks in
lockstep."""
