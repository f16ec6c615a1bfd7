"""The parser: declarations in, argv in, a Namespace of typed values out."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from flagparse.convert import convert
from flagparse.errors import UsageError
from flagparse.help import format_help
from flagparse.spec import Option, Positional, dest_from_names


class Namespace(dict):
    """A dict whose keys are also attributes, like argparse's Namespace."""

    def __getattr__(self, name: str) -> object:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class Parser:
    def __init__(self, program: str, description: str = "") -> None:
        self.program = program
        self.description = description
        self.options: list[Option] = []
        self.positionals: list[Positional] = []
        self._by_name: dict[str, Option] = {}

    # Declaring -----------------------------------------------------------------------------------

    def option(
        self,
        *names: str,
        action: str = "store",
        type: Callable[[str], object] = str,
        default: object = None,
        choices: Sequence[object] | None = None,
        required: bool = False,
        help: str = "",
        dest: str | None = None,
    ) -> Option:
        opt = Option(names, dest or dest_from_names(names), action, type, default, choices, required, help)
        for name in names:
            if name in self._by_name:
                raise ValueError(f"option {name!r} declared twice")
            self._by_name[name] = opt
        self.options.append(opt)
        return opt

    def flag(self, *names: str, action: str = "store_true", help: str = "") -> Option:
        default = 0 if action == "count" else False
        return self.option(*names, action=action, default=default, help=help)

    def positional(self, dest: str, type: Callable[[str], object] = str, optional: bool = False,
                   default: object = None, help: str = "") -> Positional:
        if self.positionals and self.positionals[-1].optional and not optional:
            raise ValueError(f"required positional {dest!r} cannot follow an optional one")
        pos = Positional(dest, type, optional, default, help)
        self.positionals.append(pos)
        return pos

    def help(self) -> str:
        return format_help(self.program, self.description, self.options, self.positionals)

    # Parsing -------------------------------------------------------------------------------------

    def parse(self, argv: Sequence[str]) -> Namespace:
        try:
            return self._parse(list(argv))
        except UsageError as err:
            err.program = self.program
            raise

    def _lookup(self, name: str) -> Option:
        opt = self._by_name.get(name)
        if opt is None:
            raise UsageError(f"unrecognized option: {name}")
        return opt

    def _parse(self, argv: list[str]) -> Namespace:
        values: dict[str, object] = {}
        seen: set[str] = set()
        loose: list[str] = []

        def store(opt: Option, raw: str | None) -> None:
            seen.add(opt.dest)
            if opt.action == "store_true":
                values[opt.dest] = True if raw is None else convert(opt.display, raw, bool, None)
            elif opt.action == "count":
                values[opt.dest] = int(values.get(opt.dest, opt.default or 0)) + 1
            elif opt.action == "append":
                values.setdefault(opt.dest, []).append(convert(opt.display, raw, opt.type, opt.choices))
            else:
                values[opt.dest] = convert(opt.display, raw, opt.type, opt.choices)

        i = 0
        while i < len(argv):
            arg = argv[i]
            i += 1
            if arg == "--":
                loose.extend(argv[i:])
                break
            if arg.startswith("--"):
                inline: str | None = None
                if "=" in arg:
                    name, inline = arg.split("=")
                else:
                    name = arg
                if name.startswith("--no-") and name not in self._by_name:
                    opt = self._lookup("--" + name[5:])
                    if opt.action != "store_true" or inline is not None:
                        raise UsageError(f"{name} is only valid for boolean flags")
                    seen.add(opt.dest)
                    values[opt.dest] = False
                    continue
                opt = self._lookup(name)
                if opt.takes_value and inline is None:
                    if i >= len(argv):
                        raise UsageError(f"{opt.display}: expected a value")
                    inline = argv[i]
                    i += 1
                elif not opt.takes_value and inline is not None and opt.action == "count":
                    raise UsageError(f"{opt.display} does not take a value")
                store(opt, inline)
            elif arg.startswith("-") and len(arg) > 1 and not _looks_negative(arg):
                # A cluster: -vvx, or -ofile where -o takes a value and swallows the rest.
                j = 1
                while j < len(arg):
                    opt = self._lookup("-" + arg[j])
                    j += 1
                    if opt.takes_value:
                        if j < len(arg):
                            store(opt, arg[j:])
                        elif i < len(argv):
                            store(opt, argv[i])
                            i += 1
                        else:
                            raise UsageError(f"{opt.display}: expected a value")
                        break
                    store(opt, None)
            else:
                loose.append(arg)

        for opt in self.options:
            if opt.dest not in values:
                if opt.required:
                    raise UsageError(f"missing required option {opt.display}")
                values[opt.dest] = list(opt.default) if isinstance(opt.default, list) else opt.default
        self._bind_positionals(loose, values)
        return Namespace(values)

    def _bind_positionals(self, loose: list[str], values: dict[str, object]) -> None:
        required = [p for p in self.positionals if not p.optional]
        if len(loose) < len(required):
            missing = ", ".join(p.dest for p in required[len(loose):])
            raise UsageError(f"missing positional argument(s): {missing}")
        if len(loose) > len(self.positionals):
            raise UsageError(f"unexpected argument(s): {' '.join(loose[len(self.positionals):])}")
        for pos, raw in zip(self.positionals, loose + [None] * len(self.positionals)):
            values[pos.dest] = pos.default if raw is None else convert(pos.dest, raw, pos.type, pos.choices)


def _looks_negative(arg: str) -> bool:
    try:
        float(arg)
    except ValueError:
        return False
    return True
