"""strata.app"""
