"""What a parent's end does to its unfinished children: the parent-close policy (``engine/children.py`` applies it)."""

from __future__ import annotations

import enum

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _


class ParentClosePolicy(enum.StrEnum):
    """What happens to a child run that has not finished when its parent run ends (completes, fails, is canceled)."""

    ABANDON = "abandon"
    """Nothing: the child runs on alone (the default)."""
    TERMINATE = "terminate"
    """The child is canceled at once, in the transaction that ends the parent; its compensations do not run."""
    REQUEST_CANCEL = "request_cancel"
    """The child's cancel is requested: a worker runs its compensations, then ends it as canceled."""

    @classmethod
    def choices(cls) -> list[tuple[str, str | Promise]]:
        """``(value, label)`` pairs for a model field (labels translated lazily)."""
        return [(policy.value, LABELS[policy]) for policy in cls]

    @classmethod
    def values(cls) -> list[str]:
        return [policy.value for policy in cls]


LABELS: dict[ParentClosePolicy, str | Promise] = {
    ParentClosePolicy.ABANDON: _("Abandon"),
    ParentClosePolicy.TERMINATE: _("Terminate"),
    ParentClosePolicy.REQUEST_CANCEL: _("Request cancel"),
}


def check_parent_close_policy(value: object, where: str) -> ParentClosePolicy:
    """``value`` as a :class:`ParentClosePolicy`; ValueError naming the allowed values otherwise."""
    for policy in ParentClosePolicy:
        if value == policy.value:
            return policy
    allowed = ", ".join(repr(v) for v in ParentClosePolicy.values())
    raise ValueError(f"{where}: parent_close_policy must be one of {allowed}, got {value!r:.80}")
