"""`python -m megalab.train`: the trainer (megalab.train.loop)."""

from megalab.train.loop import main

if __name__ == "__main__":
    main()
