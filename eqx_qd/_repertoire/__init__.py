"""Repertoires: the archives a QD run keeps, and what an insertion reports."""

from ._aurora import (
    AbstractObservationEncoder as AbstractObservationEncoder,
    aurora_slots as aurora_slots,
    AuroraOffer as AuroraOffer,
    AuroraRepertoire as AuroraRepertoire,
)
from ._base import (
    AbstractCellRepertoire as AbstractCellRepertoire,
    AbstractMultiObjectiveRepertoire as AbstractMultiObjectiveRepertoire,
    AbstractRepertoire as AbstractRepertoire,
    AddInfo as AddInfo,
    AddStatus as AddStatus,
    Elites as Elites,
    elites_box as elites_box,
    valid_candidates as valid_candidates,
)
from ._discount import (
    discount_mlp as discount_mlp,
    DiscountModelRepertoire as DiscountModelRepertoire,
)
from ._dns import (
    competition_fitness as competition_fitness,
    DNSRepertoire as DNSRepertoire,
)
from ._export import to_dataframe as to_dataframe
from ._extract import (
    Extracted as Extracted,
    ExtractOffer as ExtractOffer,
    ExtractRepertoire as ExtractRepertoire,
)
from ._guided import (
    AbstractGuidedRepertoire as AbstractGuidedRepertoire,
    DensityRepertoire as DensityRepertoire,
    kde_density as kde_density,
    Reservoir as Reservoir,
)
from ._low_spread import dispersion as dispersion, LowSpreadRepertoire as LowSpreadRepertoire
from ._pareto import ParetoRepertoire as ParetoRepertoire
from ._population import (
    AbstractPopulationRepertoire as AbstractPopulationRepertoire,
    NSGA2Repertoire as NSGA2Repertoire,
    SPEA2Repertoire as SPEA2Repertoire,
)
from ._sampled import (
    AbstractSampledRepertoire as AbstractSampledRepertoire,
    SampledExtra as SampledExtra,
)
from ._sliding import SlidingBoundariesRepertoire as SlidingBoundariesRepertoire
from ._tessellated import (
    AbstractRepertoireOverCells as AbstractRepertoireOverCells,
    Annealing as Annealing,
    bytes_per_cell as bytes_per_cell,
    init_repertoire as init_repertoire,
    MAPElitesRepertoire as MAPElitesRepertoire,
)
from ._unstructured import UnstructuredRepertoire as UnstructuredRepertoire
