#!/usr/bin/env python3
"""Fails when a module of the agent crate imports a module of a higher layer, or one adapter
imports the other. The layers, lowest first (docs/architecture.md draws them):

  base      shared plumbing: errors, settings, API clients and parameters, compact stores, metrics
  adapters  the hub (`hub`) and the spoke (`spoke`), each on its own: neither imports the other
  logic     the work logic (`work`, with the context it runs with)
  wiring    the controller, the runtime, what operators reach (`serve`), the crate root

Edges are found as `scripts/module-cycles.py` finds them (the same parser, imported).
"""
import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SPEC = importlib.util.spec_from_file_location("module_cycles", ROOT / "scripts" / "module-cycles.py")
cycles = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(cycles)

BASE, ADAPTERS, LOGIC, WIRING = range(4)
LAYER_NAMES = ["base", "adapters", "logic", "wiring"]

# By the module's path: the longest prefix listed decides.
LAYERS = {
    ("error",): BASE,
    ("config",): BASE,
    ("params",): BASE,
    ("client",): BASE,
    ("packed",): BASE,
    ("stored",): BASE,
    ("finalizer_patch",): BASE,
    ("metrics",): BASE,
    ("tls",): BASE,
    ("latest",): BASE,
    ("backoff",): BASE,
    ("hub",): ADAPTERS,
    ("spoke",): ADAPTERS,
    ("work",): LOGIC,
    ("controller",): WIRING,
    ("run",): WIRING,
    ("serve",): WIRING,
    (): WIRING,
}


def layer_of(module: tuple):
    for n in range(len(module), -1, -1):
        if module[:n] in LAYERS:
            return LAYERS[module[:n]], module[:n]
    return None, None


def main() -> int:
    src = ROOT / "crates" / "agent" / "src"
    modules = {cycles.module_path(src, f): f for f in sorted(src.rglob("*.rs"))}
    bad = []
    for mod, f in modules.items():
        here, here_key = layer_of(mod)
        if here is None:
            bad.append(f"{'::'.join(mod)}: no layer assigned (scripts/agent-layers.py)")
            continue
        for cur, rest in cycles.edges_of(f.read_text(), mod, f.name in ("mod.rs", "lib.rs")):
            target = tuple(cur)
            rest = list(rest)
            while rest and target + (rest[0],) in modules:
                target = target + (rest.pop(0),)
            if target == mod or target not in modules:
                continue
            there, there_key = layer_of(target)
            if there is None:
                continue
            up = there > here
            across = here == there == ADAPTERS and here_key[:1] != there_key[:1]
            if up or across:
                bad.append(
                    f"{'::'.join(mod)} ({LAYER_NAMES[here]}) imports {'::'.join(target)} ({LAYER_NAMES[there]})"
                )
    for line in sorted(set(bad)):
        print("agent:", line)
    if bad:
        print(f"{len(set(bad))} imports against the agent's layers (base < adapters < logic < wiring)")
        return 1
    print("the agent's layers point one way")
    return 0


if __name__ == "__main__":
    sys.exit(main())
