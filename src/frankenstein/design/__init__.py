"""Designs: registration, runs, exact statistics, decision rules and the planner."""
