# agenthost-protocol: zsh starts with ZDOTDIR pointing here.  The user's own .zshenv
# runs with their ZDOTDIR; ours is set back for .zshrc (which installs the integration).
__ahp_zdotdir=$ZDOTDIR
if [[ -n ${AHP_USER_ZDOTDIR-} ]]; then
    ZDOTDIR=$AHP_USER_ZDOTDIR
else
    ZDOTDIR=$HOME
fi
[[ -r $ZDOTDIR/.zshenv ]] && . $ZDOTDIR/.zshenv
__ahp_user_zdotdir=$ZDOTDIR
ZDOTDIR=$__ahp_zdotdir
