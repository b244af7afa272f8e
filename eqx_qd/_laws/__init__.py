"""The laws kit behind `eqx_qd.testing`: how a law runs (`runner`), and the laws of emitters,
repertoires, rankers, and agents and environments, one file each."""

from .agents import (
    AGENT_LAWS as AGENT_LAWS,
    check_agent as check_agent,
    check_env as check_env,
    ENV_LAWS as ENV_LAWS,
)
from .emitters import check_emitter as check_emitter, EMITTER_LAWS as EMITTER_LAWS
from .rankers import check_ranker as check_ranker, RANKER_LAWS as RANKER_LAWS
from .repertoires import (
    check_repertoire as check_repertoire,
    REPERTOIRE_LAWS as REPERTOIRE_LAWS,
)
from .runner import keep_python_random as keep_python_random, LawBroken as LawBroken
