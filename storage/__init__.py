"""The conversation store: async engine, ORM models and repositories. The caller owns the transaction."""
