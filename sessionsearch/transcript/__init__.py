"""What a transcript is, below every store: its events parsed and checked (events.py), and where
appended events go in a window's tree (append.py). Pure rules with no store or search of their
own, so a store's write transaction can run them and the store never imports the indexer."""
