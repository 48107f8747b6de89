"""strata.resources"""
