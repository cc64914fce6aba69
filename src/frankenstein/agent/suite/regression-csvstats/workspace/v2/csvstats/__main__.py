import sys

from csvstats.cli import main

sys.exit(main(sys.argv[1:]))
