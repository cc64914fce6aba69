from frankenstein.cli import main

main()
