"""Layer 4: decisions and arithmetic over recorded facts: the notice budget, sizing, the hang limits, the requeue
and in-job restart decision, the goodput ledger."""
