"""A second process for lease tests: ``python -m tests.runtime.lease_holder DB SESSION_ID WAIT_S``.

It takes the session's lease with :func:`hermes_actors.runtime.leases.hold_lease`, prints ``HELD <owner>`` (or ``BUSY
<message>`` and exits 3), then holds it until a line arrives on stdin, releases it and prints ``RELEASED``. A line
``end`` first ends the session with ``user_exit`` under the lease (a terminal chat closed there); ``end KEY OTHER``
also points routing key ``KEY`` at session ``OTHER`` (the key moved on there, as a compression moves it).
"""

from __future__ import annotations

import sys

from hermes_actors.errors import SessionBusyError
from hermes_actors.runtime.leases import hold_lease, new_lease_owner
from hermes_actors.store import EndReason, Store


def main(argv: list[str]) -> int:
    path, session_id, wait_s = argv[0], argv[1], float(argv[2])
    owner = new_lease_owner()
    with Store.open(path) as store:
        try:
            hold_lease(store, session_id, owner, ttl_s=3600, wait_s=wait_s)
        except SessionBusyError as exc:
            print(f"BUSY {exc}", flush=True)
            return 3
        print(f"HELD {owner}", flush=True)
        command = sys.stdin.readline().split()
        if command[:1] == ["end"]:
            with store.transaction():
                store.end_session(session_id, EndReason.USER_EXIT)
                if len(command) == 3:
                    store.set_route(command[1], command[2])
        store.leases.release(session_id, owner)
        print("RELEASED", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
