from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('machines', '0004_machine_volumes'),
    ]

    operations = [
        migrations.AddField(
            model_name='machine',
            name='suspect_until',
            field=models.DateTimeField(blank=True, help_text='Planned on only when nothing else fits until then (a stall verdict named it).', null=True),
        ),
        migrations.AddField(
            model_name='machine',
            name='suspect_reason',
            field=models.CharField(blank=True, help_text='Why it is suspect.', max_length=500),
        ),
    ]
