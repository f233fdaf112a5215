"""containers"""
