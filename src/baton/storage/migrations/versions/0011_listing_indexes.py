"""Listings by keyset: organisations by id, schedulers by (organisation, id), compared byte by byte

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05 08:30:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# storage/listings.py orders and searches with the "C" collation on PostgreSQL (byte order, whatever
# the database's locale): these indexes are in that collation, so a page, a deep page and a prefix
# search are each one index range. SQLite compares bytes by default; its organisations' primary key
# serves the organisations' listing already.
POSTGRES = [
    'CREATE INDEX ix_organisations_listing ON organisations (id COLLATE "C")',
    'CREATE INDEX ix_schedulers_listing ON schedulers (organisation COLLATE "C", id COLLATE "C")',
]
SQLITE = ["CREATE INDEX ix_schedulers_listing ON schedulers (organisation, id)"]


def upgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for statement in POSTGRES if postgresql else SQLITE:
        op.execute(statement)


def downgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    if postgresql:
        op.execute("DROP INDEX ix_organisations_listing")
    op.execute("DROP INDEX ix_schedulers_listing")
