from statstorm.cli import main

main()
