"""python -m torchtpu.fuzz: the differential fuzzer's command. The fuzzer
lives in the tools package, torchtpu_tools/fuzz (`import torchtpu` loads none
of it); this module only forwards to its command line."""
import sys

from torchtpu_tools.fuzz.drive import main

if __name__ == "__main__":
    sys.exit(main())
