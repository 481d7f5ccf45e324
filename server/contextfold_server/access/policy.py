"""Who may do what: every authorization decision of the service, in one place.

A key acts in its namespace with its role: an `agent` key reads and writes entries, an `admin` key
also manages the namespace (its stores and provider registrations, imports). A key bound to a user
or an agent (`contextfold keys create --user-id …`) is confined to that scope in every call: what a
call names of another scope is refused, what it leaves empty is the key's, and whatever is outside
the scope does not exist for it. So whatever reaches every user's entries or conversations is never
a bound key's, whatever its role: deleting a store, importing (which replaces entries by id), and
the providers (a registered provider is sent every user's conversations). A bound admin key
manages its own user's memory and may create stores; an unbound admin key manages the namespace.

The call pipeline asks `authorize` before a call runs; servicers ask `confine` (or `key_scope`) for
the scope a call acts in, and `sees_private_details` for how much of a failure a report may tell.
"""

from __future__ import annotations

from enum import Enum

from ..errors import PermissionDenied
from ..memory.records import Scope
from .keys import Caller


class Rule(Enum):
    # Any valid key.
    ANY_KEY = "any key"
    # An admin key.
    ADMIN = "an admin key"
    # An admin key bound to no scope: the call reaches every user's entries.
    UNBOUND_ADMIN = "an admin key bound to no scope"
    # An admin key, or a key bound to the scope the call acts in (which it is then confined to).
    ADMIN_OR_BOUND = "an admin key, or a key bound to the scope it acts in"


_SERVICE = "/contextfold.v1."
RULES = {
    f"{_SERVICE}{method}": rule
    for rule, methods in (
        (Rule.ADMIN, ("MemoryService/CreateStore",)),
        (Rule.UNBOUND_ADMIN, ("MemoryService/DeleteStore", "MemoryService/ImportMemories")),
        (Rule.ADMIN_OR_BOUND, ("MemoryService/EraseMemories",)),
        (
            Rule.UNBOUND_ADMIN,
            (
                "ProviderService/RegisterProvider",
                "ProviderService/GetProvider",
                "ProviderService/ListProviders",
                "ProviderService/UpdateProvider",
                "ProviderService/DeleteProvider",
            ),
        ),
    )
    for method in methods
}


def authorize(method: str, caller: Caller) -> None:
    """Refuse `caller` the call to `method` (a full gRPC method name) unless its key may make it."""
    rule = RULES.get(method, Rule.ANY_KEY)
    name = method.rsplit("/", 1)[-1]
    bound = bool(key_scope(caller).fields())
    admin = caller.role == "admin"
    if rule in (Rule.ADMIN, Rule.UNBOUND_ADMIN) and not admin:
        raise PermissionDenied("ADMIN_ROLE_REQUIRED", f"{name} needs an admin key; this key's role is {caller.role}")
    if rule is Rule.UNBOUND_ADMIN and bound:
        raise PermissionDenied(
            "SCOPE_BOUND_KEY", f"{name}: this key is bound to a scope, and the call reaches every user's memory"
        )
    if rule is Rule.ADMIN_OR_BOUND and not (admin or bound):
        raise PermissionDenied("ADMIN_ROLE_REQUIRED", f"{name} needs {rule.value}")


def key_scope(caller: Caller) -> Scope:
    """The scope `caller`'s key is bound to (empty for a key bound to none): what a call naming no
    scope, such as a get or a delete by id, is confined to."""
    return Scope(user_id=caller.user_id, agent_id=caller.agent_id)


def confine(caller: Caller, scope: Scope, field: str) -> Scope:
    """`scope` (at `field` in the request) within the scope `caller`'s key is bound to: a bound field
    the request leaves empty takes the key's value; one that names another is refused."""
    bound = {"user_id": caller.user_id, "agent_id": caller.agent_id}
    values = {"user_id": scope.user_id, "agent_id": scope.agent_id}
    for name, value in bound.items():
        if value and values[name] not in ("", value):
            raise PermissionDenied(
                "SCOPE_BOUND_KEY",
                f"{field}.{name}: this key is bound to another {name}; leave it empty or name its own",
            )
        values[name] = value or values[name]
    return Scope(user_id=values["user_id"], agent_id=values["agent_id"], session_id=scope.session_id)


def sees_private_details(caller: Caller) -> bool:
    """Whether a report tells `caller` why a provider failed in full (a dial error, say): admins are
    told, agents are told in brief."""
    return caller.role == "admin"
