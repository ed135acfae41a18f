"""pytest-xdist's ``--dist loadgroup``, except that a test whose worker crashed is one failed test and the run goes on
to its end (conftest.py uses it; test_crash_once.py checks it).

pytest-xdist 3.8 does two things after a crash that together make the run wait forever at 0% CPU: it queues the
crashed test again, not done, so the replacement worker runs it and crashes too; and it gives a replacement worker
one group, whose last test a worker holds back until it is given another or told to stop, which nobody does. Here the
crashed test counts as done (xdist reports it failed, naming the crash), the rest of its group is queued again for
the worker xdist starts in the crashed one's place, and a worker that takes queued groups after the first
distribution is given them until it holds more than two tests or none is left, when it is told to stop. Where two
workers crash at once, a replacement still collecting its tests takes work once it has collected, and a worker whose
channel has closed is given none (xdist 3.8 failed on both: a KeyError on the missing collection, a send on the
closed channel).
"""

import pytest


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class CrashOnce(LoadGroupScheduling):
        def remove_node(self, node):
            """At a worker's end: None where it finished its tests; else the test it was running (the first of its
            tests not done, as xdist names it), now done, and the rest of its groups queued again."""
            workload = self.assigned_work.pop(node)
            pending = [(unit, test) for unit in workload.values() for test, done in unit.items() if not done]
            if not pending:
                return None
            unit, crashed = pending[0]
            unit[crashed] = True
            # queued for the worker xdist starts in its place (``schedule``); the others may be going down too
            self.workqueue.update({group: unit for group, unit in workload.items() if not all(unit.values())})
            return crashed

        def schedule(self):
            if self.collection is None:  # the first distribution: xdist's own
                super().schedule()
                return
            for node in self.nodes:  # a replacement worker has collected: the queue is shared out
                self._fill(node)

        def _fill(self, node):
            if node not in self.registered_collections:  # a replacement still collecting takes work when it is done
                return
            while not node.shutting_down:
                held = self._pending_of(self.assigned_work[node])
                try:
                    self._reschedule(node)
                except OSError:  # its channel closed: it crashed too, and its end queues what it held
                    return
                if self._pending_of(self.assigned_work[node]) == held and not node.shutting_down:
                    return

    return CrashOnce(config, log)
