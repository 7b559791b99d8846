from .apps.cli import main

main(prog_name="perfkit")
