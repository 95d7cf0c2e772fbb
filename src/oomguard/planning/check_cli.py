"""`oomguard check`: exit non-zero when a deployment would not start or leaves too little headroom.

exit codes: 0 every deployment passes; 1 one would not start (including a flag vLLM would refuse), is
marginal (fits at the estimate, not at the edge of its bands) or misses --min-headroom / --min-concurrency;
2 bad input (a file, GPU, model or option oomguard cannot read), as for `oomguard plan`.

oomguard check k8s/vllm-deployment.yaml --min-headroom 2GiB
oomguard check serve.yaml --gpu L40S
oomguard check -- vllm serve Qwen/Qwen3-32B -tp 2 --max-model-len 40960 --gpu H100
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from oomguard.engines.vllm.flags import parse_serve_command
from oomguard.engines.vllm.versions import NEWEST_KNOWN
from oomguard.planning.check import CheckResult, Deployment, check_deployment, deployments_in_file
from oomguard.planning.ledger_check import check_ledger

EXIT_PASS, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2
from oomguard.render.host_json import host_to_dict


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="oomguard check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument(
        "files", nargs="*", help="Kubernetes manifests, vLLM config YAML, or files holding a command"
    )
    parser.add_argument("--gpu", help="GPU name, when the manifest's nodeSelector does not say")
    parser.add_argument("--gpu-memory", help="device total, e.g. 79.19GiB")
    parser.add_argument(
        "--vllm-version",
        default=None,
        help=f"whose accounting to follow (default: the image tag of a manifest, else {NEWEST_KNOWN})",
    )
    parser.add_argument("--min-headroom", default="0", help="free GPU memory required at peak (e.g. 2GiB)")
    parser.add_argument(
        "--min-concurrency",
        type=float,
        default=0.0,
        help="requests of max_model_len the KV cache must hold at once",
    )
    parser.add_argument(
        "--allow-marginal",
        action="store_true",
        help="pass deployments that fit at the estimate but not at the edge of its bands",
    )
    parser.add_argument(
        "--safety", help="the margin a fit must keep (e.g. 1GiB); default: the summed bands of the estimates"
    )
    parser.add_argument(
        "--ledger",
        metavar="LINES",
        help="check a ledger given as numbers instead: 'weights=20GiB,kv=25GiB/replica,dp=2,ep_buffer=12GiB' "
        "(lines marked /replica are held once per replica, the rest once per GPU); needs --gpu-memory or "
        "--gpu",
    )
    parser.add_argument(
        "--host-memory", help="the container's memory limit, when the manifest does not set one (e.g. 64GiB)"
    )
    parser.add_argument("--shm-size", help="the container's /dev/shm size, when the manifest does not say")
    parser.add_argument("--json", action="store_true", help="one JSON object per deployment, one per line")
    return parser


def _check_ledger(options: argparse.Namespace) -> int:
    result = check_ledger(options.ledger, gpu=options.gpu, gpu_memory=options.gpu_memory)
    if options.json:
        print(
            json.dumps(
                {
                    "name": "given ledger",
                    "ok": result.ok,
                    "message": result.message,
                    "used_bytes": result.ledger.used_bytes,
                    "total_bytes": result.ledger.total_bytes,
                    "fixes": [f.summary for f in result.fixes],
                }
            )
        )
    else:
        print(("PASS " if result.ok else "FAIL ") + result.message)
    return EXIT_PASS if result.ok else EXIT_FAIL


def main(argv: Sequence[str]) -> int:
    argv = list(argv)
    command: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]
    options = _parser().parse_args(argv)
    if options.ledger is not None:
        return _check_ledger(options)
    deployments: list[Deployment] = []
    if command:
        args = parse_serve_command(command)
        deployments.append(Deployment(args.model or "command", args, None, None, "command line"))
    for path in options.files:
        deployments += deployments_in_file(path)
    if not deployments:
        _parser().error("give a file or a command after --")
    results: list[CheckResult] = [
        check_deployment(
            d,
            gpu=options.gpu,
            gpu_memory=options.gpu_memory,
            vllm_version=options.vllm_version,
            min_headroom=options.min_headroom,
            min_concurrency=options.min_concurrency,
            allow_marginal=options.allow_marginal,
            safety=options.safety,
            host_memory=options.host_memory,
            shm_size=options.shm_size,
        )
        for d in deployments
    ]
    for result in results:
        if options.json:
            print(
                json.dumps(
                    {
                        "name": result.deployment.name,
                        "where": result.deployment.where,
                        "ok": result.ok,
                        "bad_input": result.bad_input,
                        "message": result.message,
                        "host": host_to_dict(result.host) if result.host else None,
                    }
                )
            )
        else:
            print(("PASS " if result.ok else "FAIL ") + result.message)
    failed = sum(not r.ok for r in results)
    if not options.json and len(results) > 1:
        print(f"{len(results) - failed} passed, {failed} failed", file=sys.stderr)
    unreadable = [r for r in results if r.bad_input]
    for result in unreadable:
        print(f"oomguard check: error: {result.message}", file=sys.stderr)
    if unreadable:
        return EXIT_BAD_INPUT
    return EXIT_FAIL if failed else EXIT_PASS
