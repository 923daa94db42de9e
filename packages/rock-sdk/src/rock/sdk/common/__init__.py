"""Pieces shared by the SDK: ROCK's exception names (:mod:`.exceptions`) and constants (:mod:`.constants`)."""
