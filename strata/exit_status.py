"""The exit statuses `strata serve` stops with before it serves, shared by the server and by the app, which
restarts a server that died but not one that a restart cannot help."""

CONFIGURATION_REFUSED = 2   # a flag, key or variable, or what this machine cannot run as configured: fix the file
MODEL_NOT_LOADED = 3        # the model file is missing, not GGUF, damaged or of a kind the engine cannot run,
                            # or its load failed (memory): the same file fails the same way again
CANNOT_LISTEN = 4           # its address cannot be bound: the port taken (another server), reserved or privileged, or
                            # the host not this machine's: the same address fails the same way again

# what the refusal of a second `strata serve` of one model on a disk level's folder another holds says after the flag
# and the folder (server/cache/server_lock.py, exit status 2): the app tells it from the other refusals by it, its
# advice being to stop that server or give this one another folder, not to fix the file
FOLDER_IN_USE = "this folder is in use by another strata serve of this model"
# the holder text's word, in that refusal, that the holder's stop has begun (server_lock.say_stopping): the app waits
# for such a holder to end (writing its conversations) and refuses as before where it is not there
STOPPING_SINCE = "stopping since"
