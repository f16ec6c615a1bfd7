import sys

from logsift.cli import main

sys.exit(main(sys.argv[1:]))
