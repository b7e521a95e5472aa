"""python -m torchtpu info: the platform, devices, plugin, PJRT version and the
hand-written kernels in use."""
import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m torchtpu", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="print the platform, devices, plugin path, PJRT API version and kernels")
    args = parser.parse_args(argv)
    import torchtpu
    from torchtpu import _C

    if args.command == "info":
        try:
            info = _C._info()
        except RuntimeError as e:
            print(f"torchtpu: the tpu device is not available: {e}", file=sys.stderr)
            return 1
        major, minor = info["pjrt_api_version"]
        print(f"platform:          {info['platform']} ({info['platform_version']})")
        print(f"devices:           {len(info['devices'])}")
        for i, kind in enumerate(info["devices"]):
            print(f"  tpu:{i}            {kind}")
        print(f"plugin:            {info['plugin_path']}")
        print(f"PJRT API version:  {major}.{minor}")
        print(f"kernels:           {info['kernels'] or 'none (XLA only)'}")
        print(f"lowered ops:       {len(_C._rule_ops())}")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
