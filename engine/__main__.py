from ghostless.cli.root import main

main(prog_name="python -m ghostless")
