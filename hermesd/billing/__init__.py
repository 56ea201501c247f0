"""The bill and the budgets: what every job's model calls cost, rolled up, and the limits that stop
spend.  :mod:`hermesd.billing.ledger` records and checks (a core service, ``ctx.service(Ledger)``);
:mod:`hermesd.billing.ops` is its plugin (no job kind) and the ``usage`` op; prices are
:mod:`hermesd.prices`."""
