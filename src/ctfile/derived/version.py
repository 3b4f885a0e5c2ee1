"""The version of the compiler's plan rules (SPEC §Derived tables,
``planVersion``): how a query's derivation columns (its key and aggregate
states) are derived. A derived table records the version that created its
columns; a refresh by rules of another version re-initializes the table
instead of applying a change to columns it would derive differently.
Raise it with any change to the derivation columns of a query already
accepted."""

PLAN_VERSION = 4
