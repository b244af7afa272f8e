"""Repertoires: the archives a QD run keeps, and what an insertion reports."""

from ._tessellated import (
    AddInfo as AddInfo,
    AddStatus as AddStatus,
    Annealing as Annealing,
    bytes_per_cell as bytes_per_cell,
    Elites as Elites,
    init_repertoire as init_repertoire,
    MapElitesRepertoire as MapElitesRepertoire,
)
