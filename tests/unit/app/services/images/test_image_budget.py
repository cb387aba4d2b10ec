"""The image byte budget: a client's images within its share, all within the bound."""

from __future__ import annotations

import pytest

from app.errors import ServiceUnavailable, TooManyRequests
from app.services.images.budget import ByteBudget


def test_the_byte_budget_keeps_a_clients_images_within_its_share_and_the_bound() -> None:
    budget = ByteBudget(1000, reserve=250)
    budget.take(750, "a")  # alone: all but the reserve
    with pytest.raises(TooManyRequests):
        budget.take(1, "a")
    budget.take(250, "b")  # the reserve, for a client that held nothing
    with pytest.raises(ServiceUnavailable) as caught:
        budget.take(1, "c")  # the bound itself: a 503, the server is busy
    assert caught.value.code == "images_busy"
    budget.give(750, "a")
    budget.give(250, "b")
    assert budget.used == 0 and budget.share("a") == 750
