"""The verifier's watch on pytest's own machinery: a pytest plugin that runs inside the graded test process.

The verifier passes this file's text inline to `python -P -c` (so there is no file the agent's diff could
touch) and registers the plugin with `pytest.main(plugins=[...])` before pytest reads any conftest or imports
any code of the repository. At load it records every function and class that decides an outcome: the
per-test run protocol and report construction (`_pytest.runner`: `runtestprotocol`, `call_and_report`,
`CallInfo`; `_pytest.reports.TestReport.from_item_and_call`), the hook implementations pytest ships
(`pytest_runtest_makereport`, `pytest_pyfunc_call`, `Function.runtest`, skipping's xfail handling, the JUnit
and terminal reporters), the outcome exceptions (`_pytest.outcomes`: `Skipped`, `Failed`, `XFailed`, ...) and
pluggy's hook calling; that is, every module-level function and class of those modules, the methods of their
classes with their code objects, and the modules themselves in `sys.modules`. Before the first test (after
collection imported the repository), around each call report, after each test and at the end of the session
it checks that (a check is a few C-level identity passes over the ~900 recorded objects; what changed is
named only once one fails):

- none of them was replaced, wrapped or had its code swapped;
- no hook implementation of a result-deciding hook (or of the two that run between tests) was registered
  except by pytest, pluggy, a `conftest.py` (the verifier never takes a conftest from the agent) or a
  plugin pytest loaded from an installed entry point (built-in tasks run with autoload off, so none; a
  SWE-bench image's own plugins);
- no trace or profile function is installed (one could rewrite a report as it is returned);
- a call phase that raised anything but a skip or xfail outcome, on a test without an xfail mark, made a
  `failed` report, one that raised nothing a `passed` report, and that report reached the log unchanged.

It writes to a duplicate, taken at load, of the file descriptor the verifier names (`out_fd`: the exec's
stderr, not the stream pytest reports on, so rewriting pytest's output does not reach it; pytest's output
capture cannot swallow it either), each line tagged with a nonce that only the verifier and this plugin know
(read from a file the plugin deletes at load, or keeps when several sessions share it): `LEGORL-WATCH
<nonce> start` when a session starts, `... tampered <what>` when a check fails, `... ok <n> <status>
<node id>` after each test (its worst outcome over set-up, call and teardown, from pytest's own reports),
`... end <n> <exit status> <failing>` at the end of the session, and `... exit <code>` once `pytest.main`
returned (`finish`, called by the verifier's bootstrap: a process ended by `os._exit`, a signal or an exit
handler never says it). At the end of the session and at `finish` it also checks that file descriptors 1
and 2 and its own channel are the files they were at load (a stream swapped for a pipe that rewrites
pytest's report is another file), and, given `guarded` paths (a Harbor reward file), that none of them was
written while the tests ran. The verifier treats a `tampered` line, a session that started and never said
`end`, an `end` counting other than the tests it saw, an `exit` code other than the process's, or a test
the output and the `ok` lines disagree on, as tampering: reward 0 with the reason in the report.

The module form (`verifier._WATCH_MODULE`) registers the same object through `PYTEST_PLUGINS` for pytest
runs the verifier does not start itself (a Harbor task's tests/test.sh): its hook functions are the bound
methods of one `Watch`, which `_foreign_hooks` counts as the watch's own.

What a deeper attacker could still do, and what it costs: code in the same process can do anything the
plugin can. Knowing this scheme, it can find the plugin and its nonce in memory (`gc.get_objects()`) and
silence or forge its lines, or change results without replacing any recorded object: rewrite the tests' own
code objects or source before they are imported, poke memory with `ctypes`, or rewrite frames' locals
(`f_locals` is writable on Python 3.13), or, from a hook the watch does not list (fixture set-up, say),
wrap a recorded function for the next call only and have the wrap put the original back as it starts (it
is in place at no check). Each of these must be written against this verifier specifically,
and any of them that changes outcomes without telling the canary twins from the originals is still caught
by the twins (`canary`); only a separate process that the tests do not share with the package (a runner
outside the sandbox's Python) would close the gap.
"""

import operator
import os
import sys
import threading
import types

import pytest

WATCHED_MODULES = (
    "_pytest.runner",
    "_pytest.reports",
    "_pytest.python",
    "_pytest.outcomes",
    "_pytest.skipping",
    "_pytest.junitxml",
    "_pytest.terminal",
    "_pytest.main",
    "_pytest.nodes",
    "_pytest.unittest",
    "pluggy._callers",
    "pluggy._hooks",
    "pluggy._manager",
    "pluggy._result",
)
WATCHED_HOOKS = (
    "pytest_runtestloop",
    "pytest_runtest_protocol",
    # Not result-deciding, but run between two tests: an implementation of the package's there could put
    # back a change after the check at the end of one test, for the next (see `pytest_runtest_logstart`).
    "pytest_runtest_logstart",
    "pytest_runtest_logfinish",
    "pytest_runtest_setup",
    "pytest_runtest_call",
    "pytest_runtest_teardown",
    "pytest_runtest_makereport",
    "pytest_runtest_logreport",
    "pytest_pyfunc_call",
    "pytest_report_teststatus",
    "pytest_report_to_serializable",
    "pytest_terminal_summary",
    "pytest_sessionfinish",
)
_TAG = "LEGORL-WATCH"


def _function_of(value):
    """The function a class attribute runs, through classmethod, staticmethod and property (its getter)."""
    if isinstance(value, (classmethod, staticmethod)):  # tuples: SWE-bench images run Python 3.6+
        return value.__func__
    if isinstance(value, property):
        return value.fget
    return value


class Watch:
    """The plugin object; `Watch(nonce_path)` records everything at once."""

    def __init__(self, nonce_path, out_fd=1, keep_nonce=False, guarded=()):
        with open(nonce_path, encoding="ascii") as handle:
            self.nonce = handle.read().strip()
        if not keep_nonce:
            os.unlink(nonce_path)
        try:
            self.out = os.dup(out_fd)
        except OSError:  # the channel was not passed down to this process: speak on stdout
            self.out = os.dup(1)
        # What the run's streams and own channel are at load: a stream swapped for a pipe (to rewrite what
        # pytest prints) is another open file at the end of the session.
        self.streams = {fd: _file_id(fd) for fd in (1, 2)}
        self.out_id = _file_id(self.out)
        self.guarded = tuple(guarded)
        self.guarded_at_load = _stats(self.guarded)
        self.statuses = {}
        self.failing = 0
        self.exitstatus = None
        self.started = False
        self.write = os.write
        self.tests = 0
        self.reported = {}
        self.modules = {}
        # (label, live namespace, key, the object, its code): checked by identity, thousands per test.
        self.recorded = []
        # The same, laid out for `unchanged`: builtins of C taken now (rebinding the names later changes
        # nothing here), and per namespace its keys and objects, so that a check is a few C-level passes.
        self._all, self._map, self._is = all, map, operator.is_
        self._code_of = operator.attrgetter("__code__")
        for name in WATCHED_MODULES:
            try:
                module = __import__(name, fromlist=["_"])
            except (
                ImportError
            ):  # an older pytest or pluggy (a SWE-bench image's) lays its modules out otherwise
                continue
            self.modules[name] = module
            for attr, value in vars(module).items():
                if isinstance(value, (type, types.FunctionType, types.ModuleType)):
                    self._record(f"{name}.{attr}", vars(module), attr)
                if isinstance(value, type) and getattr(value, "__module__", None) == name:
                    members = vars(value)  # one view per class: `spaces` groups the keys by it
                    for key, member in members.items():
                        if getattr(_function_of(member), "__code__", None) is not None:
                            self._record(f"{name}.{attr}.{key}", members, key)
        from _pytest.outcomes import Skipped, XFailed

        self.not_failures = (Skipped, XFailed)
        self.own_dirs = tuple(os.path.dirname(__import__(p).__file__) + os.sep for p in ("_pytest", "pluggy"))
        self.module_names = tuple(self.modules)
        self.module_objects = tuple(self.modules.values())
        spaces = {}
        for _, namespace, key, value, _ in self.recorded:
            spaces.setdefault(id(namespace), (namespace, [], []))
            spaces[id(namespace)][1].append(key)
            spaces[id(namespace)][2].append(value)
        self.spaces = tuple((ns.get, tuple(keys), tuple(values)) for ns, keys, values in spaces.values())
        coded = [(_function_of(value), code) for _, _, _, value, code in self.recorded if code is not None]
        self.functions = tuple(f for f, _ in coded)
        self.codes = tuple(c for _, c in coded)
        self.seen = set()
        self.config = None

    def _record(self, label, namespace, key):
        value = namespace[key]
        self.recorded.append((label, namespace, key, value, getattr(_function_of(value), "__code__", None)))

    def start(self):
        """Says that a session starts; the verifier counts sessions that never said `end`."""
        if not self.started:
            self.started = True
            self.say("start")
        return self

    def say(self, *words):
        self.write(self.out, ("\n" + " ".join((_TAG, self.nonce, *map(str, words))) + "\n").encode())

    def unchanged(self):
        """Whether every recorded module, object and code is still in place: the same test as `changes`,
        by identity, done in C; `changes` names what moved once this says something did. An object found
        in place has the function recorded with it (a classmethod's or property's function cannot be
        swapped), so comparing those functions' code covers `changes`'s code test."""
        same, is_ = self._all, self._is
        if not same(self._map(is_, self._map(sys.modules.get, self.module_names), self.module_objects)):
            return False
        for get, keys, values in self.spaces:
            if not same(self._map(is_, self._map(get, keys), values)):
                return False
        return same(self._map(is_, self._map(self._code_of, self.functions), self.codes))

    def changes(self):
        found = []
        if self.unchanged():
            return self._process_changes()
        for name, module in self.modules.items():
            if sys.modules.get(name) is not module:
                found.append(f"sys.modules[{name!r}]")
        for label, namespace, key, value, code in self.recorded:
            now = namespace.get(key)
            if now is not value or (code is not None and _function_of(now).__code__ is not code):
                found.append(label)
        return found + self._process_changes()

    def _process_changes(self):
        """Trace, profile and monitoring hooks, hook implementations registered by others, and the watch's
        own channel swapped for another file."""
        found = []
        if _file_id(self.out) != self.out_id:
            found.append("the watch's own output channel")
        if sys.gettrace() is not None or sys.getprofile() is not None:
            found.append("sys.settrace/sys.setprofile")
        if getattr(threading, "gettrace", lambda: None)() or getattr(threading, "getprofile", lambda: None)():
            found.append("threading.settrace/threading.setprofile")
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is not None and any(monitoring.get_tool(i) is not None for i in range(6)):
            found.append("sys.monitoring")
        if self.config is not None:
            found.extend(self._foreign_hooks())
        return found

    def _foreign_hooks(self):
        found = []
        manager = self.config.pluginmanager
        # Plugins pytest itself loaded from installed entry points (only where autoload is on: a SWE-bench
        # image's pytest-timeout or pytest-rerunfailures), which the diff cannot install.
        installed = {id(plugin) for plugin, _ in getattr(manager, "list_plugin_distinfo", list)()}
        for hook in WATCHED_HOOKS:
            caller = getattr(self.config.hook, hook, None)
            if caller is None or caller is not getattr(manager.hook, hook, None):
                found.append(f"hook {hook}")
                continue
            for impl in caller.get_hookimpls():
                where = getattr(getattr(impl.function, "__code__", None), "co_filename", "")
                ours = (
                    impl.plugin is self
                    or getattr(impl.function, "__self__", None) is self  # the module form (`plugin_module`)
                    or id(impl.plugin) in installed
                    or where.startswith(self.own_dirs)
                )
                if not ours and os.path.basename(where) != "conftest.py":
                    found.append(f"hook {hook} implemented in {where or impl.plugin_name}")
        return found

    def check(self, when):
        for what in self.changes():
            if what not in self.seen:  # each change once, where it was first seen
                self.seen.add(what)
                self.say("tampered", f"{what} (seen {when})")

    # -- pytest hooks ---------------------------------------------------------------------------------

    def pytest_sessionstart(self, session):
        self.start()  # loaded as a module plugin (`PYTEST_PLUGINS`): a `--version` run starts no session

    def pytest_configure(self, config):
        self.config = config
        self.check("at configure")

    def pytest_runtest_logstart(self, nodeid, location):
        # Before the first test: collection imported the repository. Before any later one this would repeat
        # the check after the previous test: pytest runs nothing between the two but its own loop (and the
        # protocol hooks, whose foreign implementations are themselves a change); a check costs a pass over
        # every recorded object, and a grade runs up to 64 twins besides its tests.
        if self.tests == 0:
            self.check(f"before {nodeid}")

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item, call):
        if call.when == "call":
            self.check(f"before the call report of {item.nodeid}")
        outcome = yield
        report = outcome.get_result()
        if call.when == "call":
            self.check(f"after the call report of {item.nodeid}")
        excinfo = call.excinfo  # read after the report: unittest's hook fills it in only then
        if call.when == "call" and item.get_closest_marker("xfail") is None:
            raised = excinfo is not None and not isinstance(excinfo.value, self.not_failures)
            expected = "failed" if raised else "passed" if excinfo is None else None
            if expected is not None and report.outcome != expected:
                self.say(
                    "tampered", f"the call report of {item.nodeid} says {report.outcome}, not {expected}"
                )
        self.reported[id(report)] = (report, report.outcome)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report):
        status = _status_of(report)
        if status is not None:
            self.statuses[report.nodeid] = _worse(self.statuses.get(report.nodeid), status)
        kept = self.reported.pop(id(report), None)
        if kept is None or kept[1] != report.outcome:
            self.say("tampered", f"the {report.when} report of {report.nodeid} changed after it was made")

    def pytest_runtest_logfinish(self, nodeid, location):
        self.check(f"after {nodeid}")
        self.tests += 1
        status = self.statuses.get(nodeid, "missing")
        self.failing += status in ("failed", "error")
        self.say("ok", self.tests, status, nodeid)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        self.check("at the end of the session")
        self.exitstatus = int(session.exitstatus)
        now = _stats(self.guarded)
        for i, path in enumerate(self.guarded):  # no zip(strict=): SWE-bench images run Python 3.6+
            if now[i] != self.guarded_at_load[i]:
                self.say("tampered", f"{path} was written during the test run, before the verifier's step")
        self._check_streams("at the end of the session")
        self.say("end", self.tests, self.exitstatus, self.failing)

    def _check_streams(self, when):
        for fd, was in self.streams.items():
            if _file_id(fd) != was:
                self.say("tampered", f"file descriptor {fd} is another file than at load ({when})")
                self.streams[fd] = _file_id(fd)

    def finish(self, code):
        """Called by the verifier's bootstrap once `pytest.main` returned `code`: the process reached pytest's
        own exit path (an `os._exit` or a kill before it leaves no `exit` line) with its streams as at
        load."""
        self.check("after the session")
        self._check_streams("after the session")
        self.say("exit", int(code))
        return int(code)


def _file_id(fd):
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _stats(paths):
    """Size, mtime and inode of each path (None where there is none)."""
    out = []
    for path in paths:
        try:
            st = os.lstat(path)
        except OSError:
            out.append(None)
            continue
        out.append((st.st_size, st.st_mtime_ns, st.st_ino, st.st_mode))
    return out


_ORDER = ("error", "failed", "xpassed", "passed", "xfailed", "skipped")


def _worse(old, new):
    if old is None:
        return new
    return old if _ORDER.index(old) <= _ORDER.index(new) else new


def _status_of(report):
    """A phase report's status in the verifier's words (a failing set-up or teardown is an error)."""
    xfail = hasattr(report, "wasxfail")
    if report.when == "call":
        if report.outcome == "skipped":
            return "xfailed" if xfail else "skipped"
        if report.outcome == "passed":
            return "xpassed" if xfail else "passed"
        return "failed"
    if report.outcome == "failed":
        return "error"
    if report.outcome == "skipped":
        return "xfailed" if xfail else "skipped"
    return None
