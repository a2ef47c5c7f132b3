"""How every chapter trains and scores its models: the corpus and its
split, the seed offset every run reads, the one rule for arithmetic,
``train_lm`` and side-by-side runs, bits per character and loss by
position.

The model parts (``mlexp.transformer``, ``mlexp.position``, ...) use this
subpackage; it imports nothing from them.
"""
