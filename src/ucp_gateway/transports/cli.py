"""Remote transports on the command line (solid-verbs spec/transport.md "CLI", "MCP stdio").

- ``ucp-gateway mcp --gateway URL [--dotted-names]``: the MCP stdio bridge (:mod:`.mcp_stdio`).
- ``ucp-gateway verbs list --gateway URL [--json] [--shape S] [--surface S]``: the remote manifest.
- ``ucp-gateway agent dispatch VERB --gateway URL --args JSON [--confirm] [--phrase P --nonce N]
  [--idempotency-key K] [--json]``: through ``POST /api/v1/agent/dispatch`` (surface ``cli``).
- Shortcuts for the busiest verbs (:data:`SHORTCUTS`), e.g. ``ucp-gateway customer-context cust_1
  --gateway URL`` = ``agent dispatch customer.context --args '{"customer_id":"cust_1"}'``.

``verbs list`` and ``agent dispatch`` belong to the verbs runtime; this module adds ``--gateway``
to them (without it they run locally, unchanged). ``--gateway`` defaults to ``UCPGW_GATEWAY``.
Credentials: a staff token in ``UCPGW_TOKEN``, or the agent key of :mod:`.agentkey`.

A typed-phrase verb answers ``dispatch_pending`` with the phrase: on a terminal (and without
``--json``) the command shows the phrase verbatim, asks for it, and sends it back with the nonce;
otherwise it prints the pending envelope and exits 1 (rerun with ``--confirm --phrase --nonce``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from ..config import Settings
from ..errors import BadRequest
from .agentkey import load_agent_key
from .remote import GatewayClient

__all__ = ["SHORTCUTS", "cmd_mcp", "cmd_remote_dispatch", "cmd_remote_list", "register"]

ENV_GATEWAY = "UCPGW_GATEWAY"
ENV_TOKEN = "UCPGW_TOKEN"  # noqa: S105 - the variable name, not a secret
# command -> (verb, positional argument name)
SHORTCUTS: dict[str, tuple[str, str]] = {
    "customer-context": ("customer.context", "customer_id"),
    "explain-total": ("orders.explain_total", "order_id"),
    "next-actions": ("sales.suggest_next_actions", "customer_id"),
    "refund-impact": ("payments.preview_refund_impact", "order_id"),
}


def _client(args: argparse.Namespace, surface: str, settings: Settings) -> GatewayClient:
    url = args.gateway or os.environ.get(ENV_GATEWAY)
    if not url:
        raise BadRequest(f"--gateway (or {ENV_GATEWAY}) is required")
    token = os.environ.get(ENV_TOKEN) or None
    key = None if token else load_agent_key()
    return GatewayClient(url, surface=surface, token=token, key=key)


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True))


async def cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    from .mcp_stdio import run_stdio

    async with _client(args, "mcp_stdio", settings) as gw:
        await run_stdio(gw, dotted=args.dotted_names)
    return 0


async def cmd_remote_list(args: argparse.Namespace, settings: Settings) -> int:
    async with _client(args, args.surface or "cli", settings) as gw:
        if not args.surface:
            gw.surface = ""  # the whole manifest
        records = await gw.manifest(shape=args.shape)
    if args.json:
        _print_json(records)
    else:
        for r in records:
            print(f"{r['name']:34} {r['shape']:12} {r.get('side_effects', 'read'):6} {r['description'][:70]}")
    return 0


def _show(env: dict[str, Any]) -> None:
    if env.get("ok"):
        print(f"ok {env['verb']} audit_id={env.get('audit_id')}")
        _print_json(env.get("result"))
        return
    e = env.get("error") or {}
    print(f"{e.get('reason')}: {e.get('message')}" + (f" ({e['hint']})" if e.get("hint") else ""))
    pending = env.get("pending") or {}
    if pending.get("required_phrase"):
        print(f"phrase: {pending['required_phrase']}\nnonce:  {pending.get('nonce')}")


async def _dispatch(args: argparse.Namespace, settings: Settings, verb: str, verb_args: dict[str, Any]) -> int:
    body: dict[str, Any] = {"verb": verb, "args": verb_args, "confirm": bool(args.confirm)}
    for k in ("phrase", "nonce", "idempotency_key"):
        v = getattr(args, k, None)
        if v is not None:
            body["typed_phrase" if k == "phrase" else k] = v
    async with _client(args, "cli", settings) as gw:
        env = await gw.dispatch(body)
        pending = env.get("pending") or {}
        interactive = not args.json and sys.stdin.isatty()
        if not env.get("ok") and interactive and pending.get("required_phrase") and pending.get("nonce"):
            print(f"This action needs the typed phrase:\n\n    {pending['required_phrase']}\n")
            typed = await asyncio.to_thread(input, "Type it exactly to confirm: ")
            body.update(confirm=True, typed_phrase=typed, nonce=pending["nonce"])
            env = await gw.dispatch(body)
    if args.json:
        _print_json(env)
    else:
        _show(env)
    return 0 if env.get("ok") else 1


async def cmd_remote_dispatch(args: argparse.Namespace, settings: Settings) -> int:
    try:
        verb_args = json.loads(args.args)
    except ValueError:
        raise BadRequest("--args must be a JSON object") from None
    if not isinstance(verb_args, dict):
        raise BadRequest("--args must be a JSON object")
    return await _dispatch(args, settings, args.verb, verb_args)


def _shortcut(verb: str, arg: str) -> Callable[[argparse.Namespace, Settings], Any]:
    async def cmd(args: argparse.Namespace, settings: Settings) -> int:
        extra = json.loads(args.args) if args.args else {}
        if not isinstance(extra, dict):
            raise BadRequest("--args must be a JSON object")
        return await _dispatch(args, settings, verb, {arg: args.target, **extra})

    return cmd


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def _remote_options(p: argparse.ArgumentParser, *, dispatch: bool) -> None:
    p.add_argument("--gateway", help=f"base URL of a remote gateway (default ${ENV_GATEWAY})")
    if dispatch:
        for opt in ("--confirm", "--phrase", "--nonce", "--idempotency-key", "--json", "--args"):
            if opt not in p._option_string_actions:
                if opt in ("--confirm", "--json"):
                    p.add_argument(opt, action="store_true")
                else:
                    p.add_argument(opt, default="{}" if opt == "--args" else None)


def _either(local: Callable | None, remote: Callable, need: tuple[str, ...]) -> Callable:
    async def cmd(args: argparse.Namespace, settings: Settings) -> int:
        if args.gateway or (local is None and os.environ.get(ENV_GATEWAY)):
            return await remote(args, settings)
        missing = [n for n in need if getattr(args, n, None) is None]
        if local is None or missing:
            flags = ", ".join("--as" if n == "role" else f"--{n}" for n in missing) or "--gateway"
            raise BadRequest(f"give --gateway URL, or {flags} to run locally")
        return await local(args, settings)

    return cmd


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``mcp`` and the shortcuts; add ``--gateway`` to ``verbs list`` and ``agent dispatch``
    (registering them when the verbs runtime did not)."""
    p = sub.add_parser("mcp", help="run an MCP stdio server in front of a remote gateway")
    p.add_argument("--gateway", help=f"base URL of the gateway (default ${ENV_GATEWAY})")
    p.add_argument("--dotted-names", action="store_true", help="tool names as registered (dots kept)")
    p.set_defaults(func=cmd_mcp)

    verbs = sub.choices.get("verbs") or sub.add_parser("verbs", help="the verb registry")
    vsub = _subparsers(verbs) or verbs.add_subparsers(dest="verbs_cmd", required=True)
    lst = vsub.choices.get("list")
    if lst is None:
        lst = vsub.add_parser("list", help="list verbs")
        lst.add_argument("--json", action="store_true")
        lst.add_argument("--surface")
        lst.add_argument("--shape")
    _remote_options(lst, dispatch=False)
    lst.set_defaults(func=_either(lst.get_default("func"), cmd_remote_list, ()))

    agent = sub.choices.get("agent") or sub.add_parser("agent", help="act as an agent")
    asub = _subparsers(agent) or agent.add_subparsers(dest="agent_cmd", required=True)
    disp = asub.choices.get("dispatch")
    if disp is None:
        disp = asub.add_parser("dispatch", help="dispatch one verb")
        disp.add_argument("verb")
    need = []
    for dest in ("company", "role"):  # required locally only; --gateway replaces them
        for action in disp._actions:
            if action.dest == dest and action.required:
                action.required = False
                need.append(dest)
    _remote_options(disp, dispatch=True)
    disp.set_defaults(func=_either(disp.get_default("func"), cmd_remote_dispatch, tuple(need)))

    for name, (verb, arg) in SHORTCUTS.items():
        p = sub.add_parser(name, help=f"shortcut for agent dispatch {verb}")
        p.add_argument("target", help=arg)
        _remote_options(p, dispatch=True)
        p.set_defaults(func=_either(None, _shortcut(verb, arg), ()))
