"""Slot leases (``LeaseTable``): slots of a pool that actors register for.

An actor registers ``(actor_id, run_id, num_envs, num_nodes)`` and receives a lease
(random 63-bit id) over ``num_envs`` slots (at most ``max_lease_slots``, so one caller
cannot take every slot). MuZero's latent cache (``muzero.algorithms.muzero.latent_cache``)
keeps one search tree's hidden states per slot; the step-streaming service
(``muzero.algorithms.streaming``) leases remote env ids, one per slot (``max_nodes`` 1).

A new registration by the same actor releases its previous lease (SEED's run-id rule),
but only when it comes from the same run (re-registering, e.g. after a server restart) or the old lease
has been idle for ``supersede_idle_s`` (a restarted actor's predecessor is dead, so its
lease is idle); otherwise the registration is refused with ``UNAVAILABLE`` (retry
later) and the live lease keeps working, so another local process cannot end an
active actor's lease by naming its actor id.
A lease not used for ``timeout_s`` seconds expires and its slots return to the pool.
Ended leases are remembered (bounded) so a caller learns *why* its lease is gone:
``superseded`` (do not re-register: a newer run of this actor owns it),
``expired`` or ``unknown`` (e.g. the server restarted: register again).

This module imports grpc, numpy and the standard library, never TensorFlow.
"""
from __future__ import annotations

import collections
import secrets
import threading
import time
from typing import Callable, Optional

import grpc
import numpy as np

from muzero.rpc.server import RequestError

LEASE_UNKNOWN = "lease-unknown"
LEASE_EXPIRED = "lease-expired"
LEASE_SUPERSEDED = "lease-superseded"
LEASE_RELEASED = "lease-released"
_ENDED_MEMORY = 65536


class Lease:
    """Slots owned by one registration. ``row_base[e]`` = first cache row of env e."""

    __slots__ = ("lease_id", "actor_id", "run_id", "slots", "row_base", "num_envs",
                 "num_nodes", "last_seen", "alive")

    def __init__(self, lease_id: int, actor_id: int, run_id: int, slots: np.ndarray,
                 max_nodes: int, num_nodes: int, now: float):
        self.lease_id, self.actor_id, self.run_id = lease_id, actor_id, run_id
        self.slots = slots                                   # [E] int64 global slot ids
        self.row_base = slots * np.int64(max_nodes)          # [E] int64
        self.num_envs, self.num_nodes = len(slots), num_nodes
        self.last_seen, self.alive = now, True


class LeaseTable:
    """Slot allocation. Mutations hold ``lock``; the services' batch threads hold it too
    while they use the leased slots (MuZero's cache writes, the streaming service's
    per-env bookkeeping), so a lease cannot end half-way through a batch."""

    def __init__(self, num_slots: int, max_nodes: int, timeout_s: float,
                 clock: Callable[[], float] = time.monotonic, *, supersede_idle_s: float = 3.0,
                 max_lease_slots: Optional[int] = None, unit: str = "cache slots",
                 size_name: str = "cache_slots", full_hint: str = ""):
        """``unit`` and ``size_name`` name the slots and the setting that sizes them in the
        refusals (MuZero: cache slots; the streaming service: remote env ids); ``full_hint``
        ends the refusal of a registration that does not fit (what to do about it)."""
        self.num_slots, self.max_nodes, self.timeout_s = num_slots, max_nodes, timeout_s
        self.unit, self.size_name, self.full_hint = unit, size_name, full_hint
        self.reserved: dict[int, int] = {}
        self.clock = clock
        self.supersede_idle_s = float(supersede_idle_s)
        self.max_lease_slots = num_slots if max_lease_slots is None else int(max_lease_slots)
        self.lock = threading.RLock()
        self._owner = np.full(num_slots, -1, np.int64)      # [slots] lease id or -1
        self._leases: dict[int, Lease] = {}
        self._by_actor: dict[int, int] = {}
        self._ended: collections.OrderedDict[int, str] = collections.OrderedDict()
        self.trash_row_base = np.int64(num_slots * max_nodes)

    @property
    def num_active(self) -> int:
        return len(self._leases)

    def reserve(self, reservations: dict) -> None:
        """Keeps ``reservations[actor_id]`` slots for each of those actor ids (the learner's own
        actors) while it holds no lease: other registrations cannot take them."""
        with self.lock:
            total = sum(int(n) for n in reservations.values())
            if total > self.num_slots:
                raise ValueError(f"reserving {total} of {self.num_slots} {self.unit}")
            self.reserved = {int(a): int(n) for a, n in reservations.items()}

    @property
    def free_slots(self) -> int:
        return int(np.count_nonzero(self._owner < 0))

    def register(self, actor_id: int, run_id: int, num_envs: int, num_nodes: int) -> Lease:
        """A new lease; RequestError INVALID_ARGUMENT (num_envs above max_lease_slots),
        UNAVAILABLE (actor_id holds a lease of another run used within supersede_idle_s:
        retry later) or RESOURCE_EXHAUSTED (not enough free slots)."""
        if not 1 <= num_envs <= self.max_lease_slots:
            raise RequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"register: num_envs={num_envs} is out of range [1, {self.max_lease_slots}] "
                f"(one lease may take at most {self.max_lease_slots} of the "
                f"{self.num_slots} {self.unit})")
        with self.lock:
            now = self.clock()
            self._reclaim_expired(now)
            old_id = self._by_actor.get(actor_id)
            if old_id is not None:
                old = self._leases[old_id]
                idle = now - old.last_seen
                if old.run_id != run_id and idle < self.supersede_idle_s:
                    wait = self.supersede_idle_s - idle
                    raise RequestError(
                        grpc.StatusCode.UNAVAILABLE,
                        f"register: actor_id={actor_id} holds a lease of another run_id, used "
                        f"{idle:.1f} s ago; a new run takes it over once it has been idle for "
                        f"{self.supersede_idle_s:g} s: retry in {wait:.1f} s")
            # A refused registration changes nothing: check room before ending the old lease.
            # Slots reserved for other actor ids without a lease are not free for this one.
            kept = sum(n for a, n in self.reserved.items() if a != actor_id and a not in self._by_actor)
            available = self.free_slots + (self._leases[old_id].num_envs if old_id is not None else 0) - kept
            if available < num_envs:
                held = f", {kept} kept for the learner's own actors" if kept else ""
                raise RequestError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"register: num_envs={num_envs} exceeds the {max(available, 0)} free {self.unit} "
                    f"({self.size_name}={self.num_slots}, {len(self._leases)} live leases{held})"
                    + (f": {self.full_hint}" if self.full_hint else ""))
            if old_id is not None:
                self._end(old_id, LEASE_SUPERSEDED)
            free = np.flatnonzero(self._owner < 0)
            lease_id = secrets.randbits(63) or 1
            while lease_id in self._leases or lease_id in self._ended:
                lease_id = secrets.randbits(63) or 1
            slots = free[:num_envs].astype(np.int64)
            self._owner[slots] = lease_id
            lease = Lease(lease_id, actor_id, run_id, slots, self.max_nodes, num_nodes, now)
            self._leases[lease_id] = lease
            self._by_actor[actor_id] = lease_id
            return lease

    def get(self, lease_id: int) -> Lease:
        """The live lease, marked as seen now; RequestError FAILED_PRECONDITION otherwise."""
        lease = self._leases.get(lease_id)
        now = self.clock()
        if lease is not None and now - lease.last_seen > self.timeout_s:
            with self.lock:
                if lease.alive:
                    self._end(lease_id, LEASE_EXPIRED)
            lease = None
        if lease is None:
            reason = self._ended.get(lease_id, LEASE_UNKNOWN)
            hint = {LEASE_SUPERSEDED: "a newer run of this actor registered",
                    LEASE_EXPIRED: f"it was unused for more than {self.timeout_s} s; register again",
                    LEASE_RELEASED: "it was released; register again",
                    LEASE_UNKNOWN: "this server never granted it (restarted?); register again"}[reason]
            raise RequestError(grpc.StatusCode.FAILED_PRECONDITION,
                               f"lease={lease_id} is not live: {hint}", tag=reason)
        lease.last_seen = now
        return lease

    def owners(self, slots: np.ndarray) -> np.ndarray:
        """The lease id owning each of ``slots`` (-1 where free)."""
        return self._owner[slots]

    def ended_reason(self, lease_id: int) -> str:
        """Why a lease is not live: one of the LEASE_* tags."""
        return self._ended.get(lease_id, LEASE_UNKNOWN)

    def release(self, lease_id: int) -> bool:
        with self.lock:
            if lease_id not in self._leases:
                return False
            self._end(lease_id, LEASE_RELEASED)
            return True

    def _reclaim_expired(self, now: float) -> None:
        stale = [lid for lid, l in self._leases.items() if now - l.last_seen > self.timeout_s]
        for lid in stale:
            self._end(lid, LEASE_EXPIRED)

    def _end(self, lease_id: int, reason: str) -> None:
        # In this order, so that a thread that finds the lease's slots freed (without the
        # lock) also finds the lease gone from the table and the reason it ended.
        self._ended[lease_id] = reason
        lease = self._leases.pop(lease_id)
        lease.alive = False
        self._owner[lease.slots] = -1
        if self._by_actor.get(lease.actor_id) == lease_id:
            del self._by_actor[lease.actor_id]
        while len(self._ended) > _ENDED_MEMORY:
            self._ended.popitem(last=False)


