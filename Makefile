# Shortcuts; the README's commands are the scripts themselves (make may be missing on a fresh machine).
.PHONY: check demo test setup
check:
	bash scripts/test.sh --fast
setup:
	bash scripts/setup.sh --dev
demo:
	bash scripts/demo.sh
test:
	bash scripts/test.sh
