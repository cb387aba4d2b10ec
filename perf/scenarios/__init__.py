"""Scenarios against real servers and simulations: attacks, fleet, stalls, warm models..."""
