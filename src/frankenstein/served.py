"""The served recipe: the base recipe named by ``served`` in ``frank.toml`` plus the parts the ledger lists.

A low module on purpose: the ledger writes the steps (``ledger.adopt``/``revert`` through the store), the
registry reads the served recipe here when it freezes a design's ``served`` arm, and ``frank serve`` reads it
to launch. Each ledger step stores the whole parts list after it, so the served parts are the last step's list.

    served_parts(campaign) -> list[str]
    served_recipe(campaign) -> ResolvedRecipe       named ``served``
    describe_parts(campaign, parts) -> str          'base + draft + q8'
"""

from __future__ import annotations

from frankenstein.campaign import Campaign
from frankenstein.config import ResolvedRecipe


def served_parts(campaign: Campaign) -> list[str]:
    """The parts the ledger has adopted on top of the base recipe, in order."""
    last = campaign.store.last_steps(1)
    return list(last[0].parts) if last else []


def served_recipe(campaign: Campaign) -> ResolvedRecipe:
    """The base recipe with the served parts applied, named ``served``."""
    r = campaign.recipe(campaign.config.served, served_parts(campaign))
    return r.model_copy(update={"name": "served"})


def describe_parts(campaign: Campaign, parts: list[str]) -> str:
    """'base + draft + q8', or 'base' with no parts."""
    return " + ".join([campaign.config.served, *parts])
