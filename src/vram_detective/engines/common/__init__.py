"""What the engines share: the shape of a rule table (rules.py). Nothing engine-specific lives here."""
