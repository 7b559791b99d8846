from .apps.cli import console

console()
