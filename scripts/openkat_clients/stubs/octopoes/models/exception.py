class ObjectNotFoundException(Exception):
    pass
