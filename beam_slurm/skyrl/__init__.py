"""skyrl"""
