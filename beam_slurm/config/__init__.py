"""The recipe's typed configuration: schema (schema), loading from conf/ (load), validation, verb arguments."""
