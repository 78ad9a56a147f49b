"""Machine rows are rewritten by every agent heartbeat (a thousand agents: 500 a second). With its
pages packed full, PostgreSQL put each new row version on another page and added it to every index
of the table (five): an UPDATE of 50 rows wrote 355 WAL records. Half of each page left free lets
the new version stay on its page without touching an index (a HOT update): 58 records, less than half
the time. Rows written before this spread out as they are updated."""

from django.db import migrations

FILLFACTOR = 50


def leave_room(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        table = schema_editor.quote_name(apps.get_model("machines", "Machine")._meta.db_table)
        schema_editor.execute(f"ALTER TABLE {table} SET (fillfactor = {FILLFACTOR})")


def pack_again(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        table = schema_editor.quote_name(apps.get_model("machines", "Machine")._meta.db_table)
        schema_editor.execute(f"ALTER TABLE {table} RESET (fillfactor)")


class Migration(migrations.Migration):

    dependencies = [
        ('machines', '0002_machine_drained'),
    ]

    operations = [
        migrations.RunPython(leave_room, pack_again),
    ]
